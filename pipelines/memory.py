"""A local build's resident memory, kept from creeping with the number of images.

glibc's malloc, left to itself, raises its mmap threshold to the largest
block freed so far (up to 32 MiB) and keeps freed heap memory for reuse: the
gRPC messages a DirectRunner launcher relays, and the decoded images (a
512 px RGB is 768 KiB) and shard buffers of a worker's threads, then leave
the heap fragmented, and a build's resident memory grows with the number of
images even though Python holds none of them (``benchmarks/store_memory.py``,
docs/scaling.md). Two remedies, each where it costs little:

- the launching process takes a fixed mmap threshold (:func:`steady_memory`):
  its large blocks are mmapped and returned whole when freed; it relays
  data and does little else, so the extra page faults cost nothing;
- a worker hands its free heap memory back to the system (:func:`trim`)
  after each fetch batch and each shard, and a worker that fetches images
  every :data:`PURGE_SECONDS` from a thread of its own
  (:func:`purge_periodically`), instead of changing how it allocates (a
  fixed threshold or fewer arenas cost a fetch-heavy worker 15–25 % of its
  speed here). The thread catches what no step of ours frees: the runner's
  buffers when a stage ends and the next one's groups come in (after a
  40,000-image fetch, 90 MiB for a second or two), and what the dedup,
  index and packing steps after the fetch leave behind. jemalloc and
  mimalloc hand freed pages back by themselves after a delay; glibc keeps
  them until told. A text build fetches nothing and starts no thread.

Elsewhere than glibc both do nothing; ``CORPORA_MALLOC=default`` turns both off.

A worker also settles its garbage collector once (:func:`settle_gc`): what
it holds when its first step is set up (modules, the runner's machinery) is
moved out of the collector's sight, and it collects young objects every
50,000 allocations instead of 700. Records are short-lived and hold no
cycles, yet at the default pace every full collection walked the whole
worker: 10 % of a 200,000-document C4 build's CPU (``benchmarks/e2e.py``,
docs/benchmarks.md). ``CORPORA_GC=default`` keeps Python's own pace.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import os
import threading
import time

MMAP_THRESHOLD = 128 << 10
PURGE_SECONDS = 1.0  # a worker's free heap memory goes back at least this often
PURGE_THREAD = "corpora-purge"
GC_THRESHOLDS = (50_000, 20, 100)  # gc.set_threshold's: young, middle, old generations
_M_MMAP_THRESHOLD = -3  # mallopt's parameter (malloc.h)


@functools.lru_cache(maxsize=1)
def _libc():
    if os.environ.get("CORPORA_MALLOC") == "default":
        return None
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        if libc is None or not hasattr(libc, "mallopt") or not hasattr(libc, "malloc_trim"):
            return None
    except OSError:
        return None
    return libc


def steady_memory() -> None:
    """Give this process a fixed mmap threshold (:data:`MMAP_THRESHOLD`),
    unless the user exported ``MALLOC_MMAP_THRESHOLD_``."""
    libc = _libc()
    if libc is not None and "MALLOC_MMAP_THRESHOLD_" not in os.environ:
        libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)


def trim() -> None:
    """Return this process's free heap memory to the system (``malloc_trim``)."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


LAUNCHER_PID = "CORPORA_LAUNCHER_PID"  # the process that built the pipeline (new_pipeline)


@functools.lru_cache(maxsize=1)
def settle_gc() -> None:
    """Once per worker process: freeze what it holds (:func:`gc.freeze`:
    never scanned again) and collect at
    :data:`GC_THRESHOLDS`' pace, unless ``CORPORA_GC=default``. Called where
    a worker's steps are set up; the launching process (a test's, a
    notebook's, an in-process build's) keeps its own pace."""
    if os.environ.get("CORPORA_GC") == "default":
        return
    if os.environ.get(LAUNCHER_PID) == str(os.getpid()):
        return
    gc.freeze()  # no collection first: a worker's heap is 0.2 s of one, for little garbage
    gc.set_threshold(*GC_THRESHOLDS)


@functools.lru_cache(maxsize=1)
def purge_periodically(interval: float = PURGE_SECONDS) -> threading.Thread | None:
    """Once per worker process, called where it sets up a fetch: a daemon
    thread (:data:`PURGE_THREAD`) that calls :func:`trim` every ``interval``
    seconds for as long as the process lives. None, and no thread, in the
    launching process (a test's or a notebook's is not ours to change) and
    where there is nothing to trim (not glibc, ``CORPORA_MALLOC=default``)."""
    if _libc() is None or os.environ.get(LAUNCHER_PID) == str(os.getpid()):
        return None
    thread = threading.Thread(target=_purge, args=(interval,), name=PURGE_THREAD, daemon=True)
    thread.start()
    return thread


def _purge(interval: float) -> None:
    while True:  # a daemon: it ends with its process
        time.sleep(interval)
        trim()
