"""Peak memory of builds whose input holds a bomb, beside the same build without it.

    python benchmarks/hostile_memory.py

Issue 30's inputs that made memory or time follow what the input declared
rather than its size, each built with ``corpora build`` (one worker) beside a
baseline: the same file with the bomb taken out. The peak is of the whole
process tree (``benchmarks/store_memory.py``'s sampler). Issue 30's target:
each bomb's build within 1.5x of its baseline. Images point at a private
address the guard refuses, so nothing is fetched and the builds keep nothing
(exit 1, as a build that keeps nothing does): what is measured is reading.

1. WIT: one quote left open, then 256 MiB of short lines (1.2 MB gzipped).
2. COYO: one 64 KiB text, dictionary-encoded, on 50,000 rows.
3. COYO: one 32 MiB text cell.
4. C4: a gzip of 256 MiB of blank lines, then one record.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from benchmarks.store_memory import tree_rss  # noqa: E402
from corpora.sources.wit import reader as wit  # noqa: E402

BLOCKED = "http://10.0.0.1/img"  # refused by the address guard: no request is made


def _wit(path: str, bomb: bool) -> str:
    rows = [
        "\t".join(
            ["en", f"https://en.wikipedia.org/wiki/P{i}", "P", "", "", f"{BLOCKED}/{i}.jpg"]
            + ["true", "true", f"caption {i}", f"alt {i}", "", "", "", "", "", "", ""]
        )
        for i in range(5)
    ]
    with gzip.open(path, "wt", encoding="utf-8", compresslevel=9) as handle:
        handle.write("\t".join(wit.COLUMNS) + "\n" + "\n".join(rows) + "\n")
        if bomb:
            handle.write('"never closed\t' + "\t".join(["x"] * 16) + "\n")
            line = "short line\n" * 100_000
            for _ in range(256 << 20 >> 20):  # 1 MiB of lines at a time
                handle.write(line[: 1 << 20])
    return path


def _coyo(path: str, texts: list[str]) -> str:
    count = len(texts)
    table = pa.table(
        {
            "id": pa.array(range(1, count + 1), pa.int64()),
            "url": [f"{BLOCKED}/{i}.jpg" for i in range(count)],
            "text": texts,
        }
    )
    pq.write_table(table, path, use_dictionary=True)
    return path


def _c4(path: str, bomb: bool) -> str:
    with gzip.open(path, "wb", compresslevel=9) as handle:
        if bomb:
            for _ in range(256):
                handle.write(b"\n" * (1 << 20))
        row = {"text": "One record after the blank lines.", "timestamp": "t", "url": "u"}
        handle.write(json.dumps(row).encode() + b"\n")
    return path


def measure(command: list[str]) -> tuple[float, float, int]:
    """Wall seconds, peak MiB of the process tree, exit code."""
    peak = [0]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.05):
            peak[0] = max(peak[0], tree_rss(process.pid))

    sampler = threading.Thread(target=sample, daemon=True)
    started = time.perf_counter()
    sampler.start()
    code = process.wait()
    done.set()
    sampler.join()
    return time.perf_counter() - started, peak[0] / 2**20, code


def main() -> None:
    work = tempfile.mkdtemp(prefix="hostile-memory-")
    cases = {
        "WIT, a quote left open over 256 MiB of lines": (
            "wit",
            lambda bomb: _wit(os.path.join(work, f"wit_v1.train.all-{bomb:d}.tsv.gz"), bomb),
        ),
        "COYO, a 64 KiB text on 50,000 rows (dictionary)": (
            "coyo",
            lambda bomb: _coyo(
                os.path.join(work, f"part-{bomb:d}.parquet"),
                ["w" * 65536 if bomb else f"text {i}" for i in range(50_000)],
            ),
        ),
        "COYO, one 32 MiB text cell": (
            "coyo",
            lambda bomb: _coyo(
                os.path.join(work, f"cell-{bomb:d}.parquet"),
                ["w" * (32 << 20) if bomb else "a short text", "a dog"],
            ),
        ),
        "C4, 256 MiB of blank lines (gzip)": (
            "c4",
            lambda bomb: _c4(os.path.join(work, f"c4-train.0000{bomb:d}-of-01024.json.gz"), bomb),
        ),
    }
    print("| input | baseline peak MiB | with the bomb, peak MiB | ratio | with the bomb, s |")
    print("|---|---|---|---|---|")
    for name, (corpus, make) in cases.items():
        peaks, seconds = [], 0.0
        for bomb in (False, True):
            path = make(bomb)
            output = os.path.join(work, f"out-{corpus}-{bomb:d}-{len(peaks)}")
            command = [
                sys.executable, "-m", "cli.main", "build", corpus, "--input", path,
                "--output", output, "--workers", "1", "--progress-every", "0",
            ]  # fmt: skip
            wall, peak, _ = measure(command)
            peaks.append(peak)
            seconds = wall
        print(
            f"| {name} | {peaks[0]:.0f} | {peaks[1]:.0f} | {peaks[1] / peaks[0]:.2f} | "
            f"{seconds:.1f} |"
        )


if __name__ == "__main__":
    main()
