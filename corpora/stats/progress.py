"""A local build's progress: one line per interval, from every worker's counts.

The build's workers (processes of the DirectRunner, or the build's own
process) each keep a :class:`Tally` of what their stage did (records read and
input bytes consumed; records and images through the fetch stage) and write
it, now and then, to a file of a folder the build's process reads
(:func:`read_tallies`). That process prints :func:`progress_line` every
``--progress-every`` seconds: records read and how much of the input that
is, images fetched and their rate, shards complete, and an ETA where the
input's size is known. No worker prints a line of its own.

The clock is injected, so tests need no sleeps.

>>> totals = {"records_read": 300, "bytes_read": 60_000, "records_fetched": 100,
...           "images": 400, "images_ok": 380}
>>> progress_line(elapsed=30, totals=totals, input_bytes=60_000, shards=0, fetching_since=10)
'  … 0m30s: 300 records read (all of the input), 400 images fetched (95.0% ok, 20.0/s), 0 shards complete, about 1m00s left'
>>> progress_line(elapsed=30, totals={}, input_bytes=None, shards=1, fetching_since=None)
'  … 0m30s: 0 records read, 1 shard complete'
>>> progress_line(elapsed=5, totals={"records_read": 10, "bytes_read": 250},
...               input_bytes=1000, shards=0, fetching_since=None, fetches=False)
'  … 0m05s: 10 records read (25% of the input), 0 shards complete, about 0m15s left'
"""  # noqa: E501

from __future__ import annotations

import json
import os
import time
from typing import Callable, Mapping

from corpora.stats.table import format_count

# What the stages count (a Tally's keys).
COUNTS = ("records_read", "bytes_read", "records_fetched", "images", "images_ok")
# How often a worker rewrites its file: often enough for a line every few seconds.
WRITE_EVERY = 1.0


class Tally:
    """One worker stage's counts, written to ``directory/name.json`` at most
    every ``every`` seconds (and by :meth:`write`)."""

    def __init__(
        self,
        directory: str,
        name: str,
        every: float = WRITE_EVERY,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.path = os.path.join(directory, f"{name}.json")
        self.counts = dict.fromkeys(COUNTS, 0)
        self._every, self._clock = every, clock
        self._written: float | None = None

    def add(self, **counts: int) -> None:
        for name, value in counts.items():
            self.counts[name] += value

    def set(self, **counts: int) -> None:
        self.counts.update(counts)

    def due(self) -> bool:
        """Is it time to write the counts again?"""
        return self._written is None or self._clock() - self._written >= self._every

    def write(self, now: float | None = None) -> None:
        self._written = self._clock() if now is None else now
        temporary = f"{self.path}.{os.getpid()}.tmp"
        try:
            with open(temporary, "w", encoding="utf-8") as handle:
                json.dump(self.counts, handle)
            os.replace(temporary, self.path)  # the reader sees a whole file, old or new
        except OSError:
            pass  # progress is worth no failed build


def read_tallies(directory: str) -> dict[str, int]:
    """The sum of every worker's counts in ``directory`` (a file being replaced,
    or gone, is skipped until the next line).

    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> for name, records in (("read-1", 3), ("read-2", 2)):
    ...     tally = Tally(folder, name)
    ...     tally.add(records_read=records)
    ...     tally.write()
    >>> read_tallies(folder)["records_read"]
    5
    """
    totals = dict.fromkeys(COUNTS, 0)
    try:
        names = [name for name in os.listdir(directory) if name.endswith(".json")]
    except OSError:
        return totals
    for name in names:
        try:
            with open(os.path.join(directory, name), encoding="utf-8") as handle:
                counts = json.load(handle)
        except (OSError, ValueError):
            continue
        for key in COUNTS:
            totals[key] += int(counts.get(key, 0))
    return totals


def _minutes(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 60}m{seconds % 60:02d}s"


def progress_line(
    elapsed: float,
    totals: Mapping[str, int],
    input_bytes: int | None,
    shards: int,
    fetching_since: float | None,
    fetches: bool = True,
) -> str:
    """One progress line: ``elapsed`` seconds into the build, the workers'
    ``totals``, the input's size in bytes (``None``: not known), the shards
    complete, when the first image was fetched (seconds into the build), and
    whether the build fetches images at all.

    The ETA assumes the records left go as fast as those done: the records
    the input holds are estimated from the share of its bytes read, and a
    build with images is done when its records are through the fetch stage.
    """
    read, images = totals.get("records_read", 0), totals.get("images", 0)
    parts = [f"{format_count(read, 'record')} read"]
    share = None
    if input_bytes:
        share = min(totals.get("bytes_read", 0) / input_bytes, 1.0)
        parts[0] += " (all of the input)" if share >= 1.0 else f" ({share:.0%} of the input)"
    if images:
        ok = 100.0 * totals.get("images_ok", 0) / images
        fetching = elapsed - (fetching_since if fetching_since is not None else 0)
        rate = images / fetching if fetching > 0 else 0.0
        parts.append(f"{format_count(images, 'image')} fetched ({ok:.1f}% ok, {rate:.1f}/s)")
    parts.append(f"{format_count(shards, 'shard')} complete")
    line = f"  … {_minutes(elapsed)}: {', '.join(parts)}"
    done = _done(totals, share, fetches)
    if done is not None and 0 < done < 1:
        line += f", about {_minutes(elapsed * (1 - done) / done)} left"
    return line


def _done(totals: Mapping[str, int], share: float | None, fetches: bool) -> float | None:
    """The share of the build done, where it can be told."""
    if share is None or share == 0:
        return None
    if not fetches:  # a text corpus: reading is the work
        return share
    if not totals.get("records_fetched"):
        return None
    expected = totals.get("records_read", 0) / share  # records the whole input holds
    return min(totals.get("records_fetched", 0) / expected, 1.0) if expected else None
