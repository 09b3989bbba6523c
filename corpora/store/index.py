"""Looking URLs up: a store's committed rows as one answer per URL."""

from __future__ import annotations

import io
from typing import Any, Iterable, Iterator

from corpora.store.files import Files
from corpora.store.outcomes import UNKNOWN, Failed, ImageRef, Outcome, Stored, Unknown, resolve


def outcome_from_row(row: dict[str, Any], tar_url: str) -> Outcome:
    """The outcome a parquet row records; ``tar_url`` is its part's tar."""
    if row["status"] == "success":
        ref = ImageRef(tar_url, int(row["offset"]), int(row["size"]), row["sha256"])
        return Stored(
            row["url"],
            row["key"],
            ref,
            int(row["width"]),
            int(row["height"]),
            row["format"],
            row["http_status"],
        )
    return Failed(row["url"], row["reason"], row["http_status"], row["detail"] or "")


def read_part(files: Files, directory: str, part: str) -> Iterator[tuple[float, Outcome]]:
    """``(time recorded, outcome)`` for every row of a committed part."""
    import pyarrow.parquet as pq

    table = pq.read_table(io.BytesIO(files.read(f"{directory}/{part}.parquet")))
    tar_url = files.url(f"{directory}/{part}.tar")  # one string shared by the part's refs
    for row in table.to_pylist():
        yield row["time"], outcome_from_row(row, tar_url)


class StoreIndex:
    """One outcome per URL (:func:`~corpora.store.outcomes.resolve` over its rows).

    It holds every URL it was given in memory (a few hundred bytes each): an
    index per input split, as a fetch worker needs, is small; for a whole
    COYO-700M store, join the rows by URL in the pipeline instead
    (:meth:`ImageStore.entries <corpora.store.layout.ImageStore.entries>`).
    """

    def __init__(self, rows: Iterable[tuple[float, Outcome]] = ()):
        self._best: dict[str, tuple[float, Outcome]] = {}
        for when, outcome in rows:
            self.add(when, outcome)

    def add(self, when: float, outcome: Outcome) -> None:
        current = self._best.get(outcome.url)
        if current is None:
            self._best[outcome.url] = (when, outcome)
            return
        chosen = resolve([current, (when, outcome)])
        self._best[outcome.url] = current if chosen is current[1] else (when, outcome)

    def lookup(self, url: str) -> Stored | Failed | Unknown:
        found = self._best.get(url)
        return UNKNOWN if found is None else found[1]

    def __len__(self) -> int:
        return len(self._best)

    def __contains__(self, url: object) -> bool:
        return url in self._best

    def counts(self) -> dict[str, int]:
        """URLs stored and failed (retryable or not)."""
        counts = {"stored": 0, "failed_retryable": 0, "failed_final": 0}
        for _, outcome in self._best.values():
            if isinstance(outcome, Stored):
                counts["stored"] += 1
            elif outcome.retryable:
                counts["failed_retryable"] += 1
            else:
                counts["failed_final"] += 1
        return counts
