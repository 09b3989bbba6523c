from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from pipelines.memory import GC_THRESHOLDS, LAUNCHER_PID

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_PROBE = (
    "import gc, json, os, sys\n"
    "if sys.argv[1] == 'launcher': os.environ[{pid!r}] = str(os.getpid())\n"
    "from pipelines import memory\n"
    "memory.settle_gc()\n"
    "print(json.dumps([gc.get_threshold(), gc.get_freeze_count()]))\n"
).format(pid=LAUNCHER_PID)


def _settled(role: str, env: dict[str, str]) -> tuple[tuple, int]:
    """A fresh Python's GC pace and frozen objects after ``settle_gc``, run
    as a build's ``launcher`` or as a ``worker`` another process launched."""
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, role],
        env={**os.environ, "PYTHONPATH": REPO, LAUNCHER_PID: "1", **env},
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    threshold, frozen = json.loads(out)
    return tuple(threshold), frozen


def test_a_worker_settles_its_gc_once_set_up():
    threshold, frozen = _settled("worker", {})
    assert threshold == GC_THRESHOLDS
    assert frozen > 1000  # what it imported is out of the collector's sight


@pytest.mark.parametrize("role, env", [("launcher", {}), ("worker", {"CORPORA_GC": "default"})])
def test_the_launcher_and_an_opt_out_keep_pythons_pace(role, env):
    assert _settled(role, env) == ((700, 10, 10), 0)
