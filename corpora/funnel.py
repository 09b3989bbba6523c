"""The record funnel: what came in, what was kept, what was dropped and why.

Every build accounts for each input record: ``input == kept + sum(dropped)``.
The unit of the funnel is named per corpus (``pair`` for mmc4-pairs: one per
image of a parsed document, or one per line that could not be parsed).
"""

from __future__ import annotations

from typing import Mapping


class FunnelError(RuntimeError):
    """The funnel does not balance: records were lost or counted twice."""


def make_funnel(unit: str, input_count: int, kept: int, dropped: Mapping[str, int]) -> dict:
    """The manifest's ``funnel`` entry; raises if it does not balance."""
    dropped = {reason: int(count) for reason, count in sorted(dropped.items()) if count}
    total = kept + sum(dropped.values())
    if total != input_count:
        raise FunnelError(
            f"funnel does not balance: input {input_count} != kept {kept} + dropped {sum(dropped.values())}"
        )
    return {"unit": unit, "input": int(input_count), "kept": int(kept), "dropped": dropped}
