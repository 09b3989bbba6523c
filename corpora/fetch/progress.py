"""Progress of a long fetch: one line every ``interval`` seconds on stderr.

    fetch[pid 4242]: 12,800 URLs done, 91.3% ok, 212.4 images/s

Each worker process prints its own line (a DirectRunner build runs one fetch
stage per worker), so the rates add up across lines; a local ``corpora
build`` prints none of these, but one line of its own
(:mod:`corpora.stats.progress`).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Callable, TextIO

from corpora.stats.table import format_count


class FetchProgress:
    def __init__(
        self,
        interval: float,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
        label: str | None = None,
    ):
        self.interval = interval
        self.stream = stream
        self.clock = clock
        self.label = label or f"fetch[pid {os.getpid()}]"
        self.done = 0
        self.ok = 0
        self._started: float | None = None
        self._last = 0.0

    def update(self, ok: bool) -> None:
        now = self.clock()
        if self._started is None:
            self._started = self._last = now
        self.done += 1
        self.ok += ok
        if self.interval > 0 and now - self._last >= self.interval:
            self._last = now
            self.report(now)

    def line(self, now: float | None = None) -> str:
        now = self.clock() if now is None else now
        elapsed = max(now - (self._started if self._started is not None else now), 1e-9)
        rate = self.ok / elapsed if self._started is not None and elapsed > 1e-6 else 0.0
        share = 100.0 * self.ok / self.done if self.done else 0.0
        done = format_count(self.done, "URL")
        return f"{self.label}: {done} done, {share:.1f}% ok, {rate:.1f} images/s"

    def report(self, now: float | None = None) -> None:
        stream = self.stream or sys.stderr
        stream.write(self.line(now) + "\n")
        stream.flush()
