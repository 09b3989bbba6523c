"""What a command prints: ``corpora``'s own lines; library logs only with ``-v``.

Libraries log while they are imported (Beam warns that optional GCP clients
are missing), before ``-v`` is even parsed, and Beam's worker processes
start up with log lines of their own. Three pieces keep that off a plain
build's output:

- :func:`hold_library_logs` (called when the ``cli`` package is imported,
  before anything imports Beam) keeps the records logged that early;
- :func:`configure_logging` (once ``-v`` is known) shows them with ``-v`` and
  drops them otherwise; without ``-v`` only errors are logged, and Python
  warnings go through logging too;
- :func:`only_corpora_lines` lets through, while a build runs, only the lines
  of ``corpora``'s own progress from what worker processes and libraries
  write to the standard error file descriptor.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import threading
from typing import Iterator

# corpora's own progress lines: FetchProgress (corpora.fetch.progress) and BuildProgress
# (pipelines.launch)
OWN_LINES = re.compile("^(fetch\\[pid \\d+\\]: |  … )".encode())
_HELD_LIMIT = 1000


class _Held(logging.Handler):
    """Keeps the first records logged before the command line is parsed."""

    def __init__(self) -> None:
        super().__init__(logging.NOTSET)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if len(self.records) < _HELD_LIMIT:
            self.records.append(record)


def hold_library_logs() -> None:
    root = logging.getLogger()
    if not any(isinstance(handler, _Held) for handler in root.handlers):
        # a handler on the root logger also stops logging.warning() from
        # installing its own (the "WARNING:root:…" lines)
        root.addHandler(_Held())
    logging.captureWarnings(True)  # held as records too


def configure_logging(verbose: bool) -> None:
    """Log to stderr: everything from INFO with ``-v`` (the held records first),
    only errors without it."""
    root = logging.getLogger()
    held = [handler for handler in root.handlers if isinstance(handler, _Held)]
    logging.basicConfig(
        level=logging.INFO if verbose else logging.ERROR,
        format="%(levelname)s %(name)s: %(message)s",
        force=True,
    )
    logging.captureWarnings(not verbose)  # warnings become WARNING records: hidden
    for handler in held:
        for record in handler.records:
            if record.levelno >= root.level:
                root.handle(record)


@contextlib.contextmanager
def only_corpora_lines(enabled: bool = True) -> Iterator[None]:
    """While the block runs, a line written to file descriptor 2 (by worker
    processes, which inherit it, or by a library) reaches the terminal only if
    it is one of corpora's progress lines; this process's own ``sys.stderr``
    writes go straight out. Does nothing when not ``enabled``."""
    if not enabled:
        yield
        return
    sys.stderr.flush()
    terminal = os.dup(2)
    read_end, write_end = os.pipe()
    os.dup2(write_end, 2)
    os.close(write_end)
    previous = sys.stderr
    sys.stderr = os.fdopen(os.dup(terminal), "w", buffering=1, errors="replace")
    forward = threading.Thread(
        target=_forward, args=(read_end, terminal), daemon=True, name="corpora-stderr"
    )
    forward.start()
    try:
        yield
    finally:
        sys.stderr.flush()
        sys.stderr.close()
        sys.stderr = previous
        os.dup2(terminal, 2)  # the pipe's last writer here: the reader sees its end
        forward.join(timeout=10)  # a worker still alive keeps the pipe open; don't wait on it
        if not forward.is_alive():
            os.close(terminal)


def _forward(read_end: int, terminal: int) -> None:
    with os.fdopen(read_end, "rb") as lines:
        for line in lines:
            if OWN_LINES.match(line):
                try:
                    os.write(terminal, line)
                except OSError:
                    return
