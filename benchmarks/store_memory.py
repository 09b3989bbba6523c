"""Peak memory of a local build as it grows: 4,000 against 40,000 images.

    python benchmarks/store_memory.py                    # 4,000 and 40,000 images
    python benchmarks/store_memory.py --counts 2000 20000 --repeats 1

``corpora build coyo`` (DirectRunner, ``--workers`` processes) of a
COYO-schema parquet whose URLs a local server (a process of its own, outside
the measured tree) answers with the sample photos, resized to
``--image-size``. The peak is of the whole process tree: the sum of the
resident set sizes (``VmRSS``) of the build and every process it started,
sampled every 0.1 s from ``/proc`` (``ru_maxrss`` would give the largest
single process only). Issue 15's target: the larger build peaks within 1.3
times the smaller one, since the shuffles after the fetch stage carry
references, not images (``corpora/store/stash.py``).

Results: ``benchmarks/out/store-memory-<time>.json`` (every run, with the
load average) and a table on stdout, with the memory per record that
``docs/scaling.md`` extrapolates from.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from benchmarks.e2e import ENV, OUT, coyo_command, image_server, load, photo_dir, url_parquet  # noqa: E402


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        tree.setdefault(int(fields[1]), []).append(int(name))
    return tree


def tree_rss(root: int, each: dict[int, int] | None = None) -> int:
    """Bytes resident in ``root`` and all its descendants now (``each``: the
    peak of every process seen, by pid)."""
    tree, total, stack = _children(), 0, [root]
    while stack:
        pid = stack.pop()
        stack.extend(tree.get(pid, []))
        try:
            with open(f"/proc/{pid}/status") as handle:
                for line in handle:
                    if line.startswith("VmRSS:"):
                        rss = int(line.split()[1]) * 1024
                        total += rss
                        if each is not None:
                            each[pid] = max(each.get(pid, 0), rss)
                        break
        except OSError:
            continue
    return total


def measure(command: list[str]) -> dict:
    """Wall seconds and the peak RSS of ``command``'s whole process tree."""
    before = load()
    peak, each = {"bytes": 0}, {}
    with tempfile.TemporaryFile() as stderr:
        started = time.perf_counter()
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr, env=ENV)
        done = threading.Event()

        def sample() -> None:
            while not done.wait(0.1):
                peak["bytes"] = max(peak["bytes"], tree_rss(process.pid, each))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        code = process.wait()
        done.set()
        sampler.join()
        wall = time.perf_counter() - started
        if code != 0:
            stderr.seek(0)
            raise SystemExit(f"failed (exit {code}): {stderr.read()[-3000:].decode()}")
    return {
        "wall_s": round(wall, 2),
        "peak_tree_rss_mib": round(peak["bytes"] / 2**20, 1),
        # the launcher first, then its descendants by peak
        "peak_rss_mib_by_process": [round(each.get(process.pid, 0) / 2**20, 1)]
        + sorted((round(v / 2**20, 1) for k, v in each.items() if k != process.pid), reverse=True),
        "load_before": before,
        "load_after": load(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--counts", type=int, nargs="+", default=[4000, 40000])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--image-size", type=int, default=336)
    parser.add_argument("--latency", type=float, default=0.0)
    args = parser.parse_args()
    os.makedirs(OUT, exist_ok=True)
    work = tempfile.mkdtemp(prefix="store-memory-")
    rows = []
    try:
        with image_server(photo_dir("small"), args.latency) as port:
            for count in args.counts:
                urls = url_parquet(os.path.join(work, f"urls-{count}.parquet"), port, count)
                for _ in range(args.repeats):
                    output = os.path.join(work, f"out-{count}")
                    shutil.rmtree(output, ignore_errors=True)
                    command = coyo_command(urls, output, args)
                    command[command.index("--image-size") + 1] = str(args.image_size)
                    result = measure(command)
                    with open(os.path.join(output, "manifest.json")) as handle:
                        manifest = json.load(handle)
                    result.update(
                        images=count,
                        ok=manifest["images"]["ok"],
                        shard_bytes=manifest["totals"]["bytes"],
                    )
                    rows.append(result)
                    print(json.dumps(result), file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    with open(os.path.join(OUT, f"store-memory-{stamp}.json"), "w") as handle:
        json.dump({"args": vars(args), "runs": rows}, handle, indent=2)
    print("| images | ok | shard MB | wall s | peak tree RSS MiB | load before → after |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['images']:,} | {row['ok']:,} | {row['shard_bytes'] / 1e6:.0f} | "
            f"{row['wall_s']:.0f} | {row['peak_tree_rss_mib']:.0f} | "
            f"{row['load_before'][0]} → {row['load_after'][0]} |"
        )
    small, large = rows[0], rows[-1]
    if large["images"] == small["images"]:
        return
    ratio = large["peak_tree_rss_mib"] / small["peak_tree_rss_mib"]
    per_record = (
        (large["peak_tree_rss_mib"] - small["peak_tree_rss_mib"])
        * 2**20
        / (large["images"] - small["images"])
    )
    print(f"\npeak ratio {ratio:.2f} (target ≤ 1.3); {per_record:,.0f} bytes per extra image")


if __name__ == "__main__":
    main()
