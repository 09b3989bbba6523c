"""The record funnel: what came in, what was kept, what was dropped and why.

Every build accounts for each input record: ``input == kept + sum(dropped)``.
The unit of the funnel is named per corpus (``pair`` for mmc4-pairs: one per
image of a parsed document, or one per line that could not be parsed).
"""

from __future__ import annotations

from typing import Mapping

# Reasons renamed so that one thing has one name (old name -> name). Builds made
# before carry the old names in their manifest, stats.json, failures.parquet
# and samples' meta; docs/shard-format.md lists them.
RENAMED_REASONS = {
    "too_small": "image_too_small",
    "bad_aspect": "aspect_ratio_above_max",
    "clip_sim_below_min": "clip_similarity_below_min",
    "below_min_sim": "clip_similarity_below_min",
}


def current_reason(reason: str) -> str:
    """A reason under its current name (an old one is renamed, with its
    ``_missing_score`` form).

    >>> current_reason("too_small"), current_reason("clip_sim_below_min_missing_score")
    ('image_too_small', 'clip_similarity_below_min_missing_score')
    >>> current_reason("http_404")
    'http_404'
    """
    base, missing, _ = reason.partition("_missing_score")
    return RENAMED_REASONS.get(base, base) + missing


class FunnelError(RuntimeError):
    """The funnel does not balance: records were lost or counted twice."""


def make_funnel(unit: str, input_count: int, kept: int, dropped: Mapping[str, int]) -> dict:
    """The manifest's ``funnel`` entry; raises if it does not balance."""
    dropped = {reason: int(count) for reason, count in sorted(dropped.items()) if count}
    total = kept + sum(dropped.values())
    if total != input_count:
        raise FunnelError(
            f"funnel does not balance: input {input_count} != "
            f"kept {kept} + dropped {sum(dropped.values())}"
        )
    return {"unit": unit, "input": int(input_count), "kept": int(kept), "dropped": dropped}
