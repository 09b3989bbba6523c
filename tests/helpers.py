"""Helpers the tests share: fixture corpora, running the CLI, reading shards
with plain tarfile + numpy (independently of the project's reader)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from typing import Any

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Real upstream sample rows, copied into the repository (provenance in its README.md).
UPSTREAM = os.path.join(REPO, "tests", "data", "upstream")

# `corpora build` flags of a small, quick build against a loopback image server
SMALL_BUILD = (
    "--seq-len",
    "96",
    "--tokens-per-image",
    "8",
    "--image-size",
    "32",
    "--samples-per-shard",
    "3",
    "--workers",
    "1",
    "--allow-private-urls",
    "--progress-every",
    "0",
)


def run_cli(
    *args: str, cwd: str | None = None, timeout: float = 600, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Run ``corpora ARGS`` as a user would, in a fresh process (``env``: more
    environment variables; a ``PYTHONPATH`` there comes after the repository)."""
    extra = dict(env or {})
    env = dict(os.environ)
    path = os.pathsep.join(p for p in (extra.pop("PYTHONPATH", ""), env.get("PYTHONPATH", "")) if p)
    env.update(extra)
    env["PYTHONPATH"] = REPO + (os.pathsep + path if path else "")
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def write_jsonl(path: str, rows: list[Any]) -> str:
    with open(path, "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(row if isinstance(row, str) else json.dumps(row))
            handle.write("\n")
    return path


def read_tar(path: str) -> list[dict[str, Any]]:
    """Samples of a shard as dicts of extension → decoded value, in tar order."""
    samples: list[dict[str, Any]] = []
    with tarfile.open(path) as tar:
        for member in tar.getmembers():
            key, _, ext = member.name.partition(".")
            data = tar.extractfile(member).read()
            if not samples or samples[-1]["__key__"] != key:
                samples.append({"__key__": key, "__members__": []})
            sample = samples[-1]
            sample["__members__"].append(ext)
            if ext.endswith(".npy"):
                sample[ext] = np.load(io.BytesIO(data))
            elif ext == "json":
                sample[ext] = json.loads(data)
            else:
                sample[ext] = data
    return samples


def load_manifest(directory: str) -> dict[str, Any]:
    with open(os.path.join(directory, "manifest.json"), encoding="utf-8") as handle:
        return json.load(handle)
