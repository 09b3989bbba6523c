from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from pipelines.memory import GC_THRESHOLDS, LAUNCHER_PID, PURGE_THREAD

_glibc = sys.platform.startswith("linux") and os.confstr("CS_GNU_LIBC_VERSION") is not None
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_PROBE = (
    "import gc, json, os, sys\n"
    "if sys.argv[1] == 'launcher': os.environ[{pid!r}] = str(os.getpid())\n"
    "from pipelines import memory\n"
    "memory.settle_gc()\n"
    "memory.purge_periodically()\n"
    "import threading\n"
    "threads = sorted(t.name for t in threading.enumerate())\n"
    "print(json.dumps([gc.get_threshold(), gc.get_freeze_count(), threads]))\n"
).format(pid=LAUNCHER_PID)


def _settled(role: str, env: dict[str, str]) -> tuple[tuple, int, list[str]]:
    """A fresh Python's GC pace, frozen objects and threads after what a
    worker's fetch sets up (``settle_gc``, ``purge_periodically``), run as a
    build's ``launcher`` or as a ``worker`` another process launched."""
    threshold, frozen, threads = _fresh_python(_PROBE, role, env={LAUNCHER_PID: "1", **env})
    return tuple(threshold), frozen, threads


def _fresh_python(code: str, *args: str, env: dict[str, str]):
    """What ``code``, run by a fresh Python of this repository, prints as JSON."""
    out = subprocess.run(
        [sys.executable, "-c", code, *args],
        env={**os.environ, "PYTHONPATH": REPO, **env},
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out)


def test_a_worker_settles_its_gc_once_set_up():
    threshold, frozen, _ = _settled("worker", {})
    assert threshold == GC_THRESHOLDS
    assert frozen > 1000  # what it imported is out of the collector's sight


@pytest.mark.parametrize("role, env", [("launcher", {}), ("worker", {"CORPORA_GC": "default"})])
def test_the_launcher_and_an_opt_out_keep_pythons_pace(role, env):
    assert _settled(role, env)[:2] == ((700, 10, 10), 0)


@pytest.mark.skipif(not _glibc, reason="malloc_trim is glibc's")
def test_a_fetching_worker_purges_its_heap_from_a_thread_and_the_launcher_does_not():
    assert PURGE_THREAD in _settled("worker", {})[2]
    assert PURGE_THREAD in _settled("worker", {"CORPORA_GC": "default"})[2]  # gc only
    assert PURGE_THREAD not in _settled("launcher", {})[2]
    assert PURGE_THREAD not in _settled("worker", {"CORPORA_MALLOC": "default"})[2]


_FRAGMENTED = (
    "import json\n"
    "from pipelines import memory\n"
    "def anon():\n"
    "    for line in open('/proc/self/status'):\n"
    "        if line.startswith('RssAnon:'): return int(line.split()[1]) // 1024\n"
    "blocks = [bytes(2000) for _ in range(100_000)]  # 200 MB of glibc heap\n"
    "kept = blocks[::64]  # one block in 64 left where it was\n"
    "del blocks\n"
    "before = anon()\n"
    "memory.trim()\n"
    "print(json.dumps([before, anon(), len(kept)]))\n"
)


@pytest.mark.skipif(not _glibc, reason="malloc_trim is glibc's")
def test_trim_hands_back_the_free_pages_between_what_is_still_held():
    """What the purging thread and the fetch do: a heap freed but for a few
    scattered blocks goes back to the system, though glibc keeps it."""
    before, after, _ = _fresh_python(_FRAGMENTED, env={})
    assert before > 150  # MiB: glibc kept the freed blocks
    assert after < before - 120  # ... and handed them back when trimmed
