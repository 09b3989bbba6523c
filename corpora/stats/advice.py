"""What a build's summary advises, from its manifest: the likeliest cause of a
build that kept nothing (:func:`nothing_kept`), and what to do about the
images that failed (:func:`failures_advice`).

A build whose input had records and that keeps none is a failure (``corpora
build`` exits 1), not an empty success: the newcomer's first mistakes (file://
URLs without ``--allow-local-files``, a loopback server without
``--allow-private-urls``, a C4 file given to an MMC4 corpus, a mistyped
``--retry-reason``) all end there, and each has one likeliest fix.

>>> funnel = {"unit": "pair", "input": 9, "kept": 0, "dropped": {"local_file": 9}}
>>> nothing_kept({"funnel": funnel})
'the build kept nothing: all 9 pairs were dropped as local_file; add --allow-local-files DIR'
>>> failures_advice({"failed": {"local_file": 9}, "failures_file": "failures.parquet"})
'failed URLs: failures.parquet (local_file: add --allow-local-files DIR)'
>>> failures_advice({"failed": {"http_404": 2}, "failures_file": "failures.parquet"})
'failed URLs: failures.parquet (rebuild them with --retry-failures)'
"""

from __future__ import annotations

from typing import Mapping

from corpora.fetch.settings import SETTINGS_REASONS, is_fetch_reason

# Drops whose cause is the input or the command rather than the records.
CAUSES = {
    "missing_text_list": "the input's documents have no text_list: is it MMC4?",
    "not_in_retry_list": "no record holds a URL of --retry-failures (check --retry-reason)",
    "bad_json": "the input's lines are not JSON objects: is it the corpus's format?",
}


def nothing_kept(manifest: Mapping) -> str | None:
    """One line on why a build kept none of its input's records (``None``
    when it kept some, or had none): the most frequent drop reason, and the
    flag to add where a setting of the build decided it."""
    funnel = manifest["funnel"]
    if funnel["kept"] or not funnel["input"]:
        return None
    reason, count = max(funnel["dropped"].items(), key=lambda kv: (kv[1], kv[0]))
    share = f"all {count}" if count == funnel["input"] else f"{count} of {funnel['input']}"
    line = f"the build kept nothing: {share} {funnel['unit']}s were dropped as {reason}"
    if reason in SETTINGS_REASONS:
        return f"{line}; {SETTINGS_REASONS[reason]}"
    if reason in CAUSES:
        return f"{line}; {CAUSES[reason]}"
    if is_fetch_reason(reason):
        return f"{line}; the failed URLs are in failures.parquet"
    return f"{line} (docs/corpora.md says what each reason means)"


def failures_advice(images: Mapping) -> str:
    """The summary's line on the failed image URLs: ``--retry-failures`` where
    another attempt can help, the flag where this build's settings refused."""
    refused = [reason for reason in images["failed"] if reason in SETTINGS_REASONS]
    others = [reason for reason in images["failed"] if reason not in SETTINGS_REASONS]
    advice = [f"{reason}: {SETTINGS_REASONS[reason]}" for reason in sorted(refused)]
    if others:
        advice.append("rebuild them with --retry-failures")
    return f"failed URLs: {images['failures_file']} ({'; '.join(advice)})"
