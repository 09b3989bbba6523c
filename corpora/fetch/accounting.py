"""Per-image accounting: the manifest's ``images`` and ``consent`` sections
and ``failures.parquet``.

Every image that reaches the fetch stage ends as ``ok`` or as one named
reason. The manifest says how many of each; ``failures.parquet`` beside the
shards lists each failed URL (url, reason, HTTP status, attempts), so a later
build can take exactly those URLs again (``corpora build … --retry-failures
out/failures.parquet``).
"""

from __future__ import annotations

import itertools
from typing import BinaryIO, Iterable, Mapping

from corpora.fetch.robots import ROBOTS_TOKEN
from corpora.stats.funnel import current_reason

FAILURES = "failures.parquet"
HONOURED, IGNORED = "honoured", "ignored (--ignore-opt-out)"


def consent_summary(settings) -> dict:
    """The manifest's ``consent``: what the fetch honoured, said plainly,
    and the user agent it sent (``settings``: a :class:`~corpora.fetch.FetchSettings`).

    >>> from corpora.fetch.settings import FetchSettings
    >>> summary = consent_summary(FetchSettings(respect_opt_out=False))
    >>> summary["robots_txt"], summary["x_robots_tag"], summary["tdm_reservation"]
    ('honoured', 'ignored (--ignore-opt-out)', 'ignored (--ignore-opt-out)')
    """
    opt_outs = HONOURED if settings.respect_opt_out else IGNORED
    return {
        "robots_txt": HONOURED,
        "robots_token": ROBOTS_TOKEN,
        "x_robots_tag": opt_outs,
        "tdm_reservation": opt_outs,
        "tdmrep_json": (opt_outs if settings.tdmrep else "not asked (--tdmrep asks)"),
        "user_agent": settings.user_agent,
    }


FAILURE_COLUMNS = ("url", "reason", "status", "attempts")


def failure_schema():
    import pyarrow as pa

    return pa.schema(
        [
            ("url", pa.string()),
            ("reason", pa.string()),
            ("status", pa.int32()),
            ("attempts", pa.int32()),
        ]
    )


def write_failures(stream: BinaryIO, rows: Iterable[Mapping], rows_per_group: int = 65_536) -> int:
    """Write ``failures.parquet`` to ``stream``: one row per failed URL, in row
    groups of ``rows_per_group`` (memory stays flat however many fail; a file
    without rows still has the columns). Returns the number of rows.

    >>> import io
    >>> buffer = io.BytesIO()
    >>> write_failures(buffer, [{"url": "u", "reason": "http_404", "status": 404, "attempts": 1}])
    1
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = failure_schema()
    count = 0
    rows = iter(rows)
    with pq.ParquetWriter(stream, schema) as writer:
        while group := list(itertools.islice(rows, rows_per_group)):
            columns = {name: [row[name] for row in group] for name in FAILURE_COLUMNS}
            writer.write_table(pa.Table.from_pydict(columns, schema=schema))
            count += len(group)
    return count


def image_summary(counts: Mapping[str, int]) -> dict:
    """The manifest's ``images`` entry from counts by outcome (``ok`` or a reason).

    >>> image_summary({"ok": 7, "http_404": 2, "timeout": 1, "opted_out": 0})
    ... # doctest: +NORMALIZE_WHITESPACE
    {'input': 10, 'ok': 7, 'failed': {'http_404': 2, 'timeout': 1},
     'failures_file': 'failures.parquet'}
    """
    ok = int(counts.get("ok", 0))
    failed = {reason: int(n) for reason, n in sorted(counts.items()) if reason != "ok" and n}
    return {
        "input": ok + sum(failed.values()),
        "ok": ok,
        "failed": failed,
        "failures_file": FAILURES,
    }


def first_failure(rows: Iterable[dict]) -> dict:
    """One row per URL when a URL failed in several batches (deterministic pick)."""
    return min(rows, key=lambda r: (r["reason"], r["status"] or 0, r["attempts"]))


def failure_urls(stream: BinaryIO, reasons: Iterable[str] = ()) -> frozenset[str]:
    """The URLs of a ``failures.parquet`` read from ``stream``, optionally only
    those that failed for one of ``reasons`` (the engine opens the file:
    :func:`pipelines.storage.read_failure_urls`). Reasons renamed since the
    file was written match under either name."""
    import pyarrow.parquet as pq

    table = pq.read_table(stream, columns=["url", "reason"])
    urls = table.column("url").to_pylist()
    wanted = {current_reason(reason) for reason in reasons}
    if wanted:
        found = table.column("reason").to_pylist()
        return frozenset(u for u, r in zip(urls, found) if current_reason(r) in wanted)
    return frozenset(urls)
