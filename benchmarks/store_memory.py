"""Peak memory of a local build as it grows: 4,000 against 40,000 images.

    python benchmarks/store_memory.py                    # both configurations, 4,000 and 40,000
    python benchmarks/store_memory.py --config issue31 --counts 4000 20000
    python benchmarks/store_memory.py --config store --seq-len 2048 --per-host-concurrency 64

``corpora build coyo`` (DirectRunner, ``--workers`` processes) of a
COYO-schema parquet whose URLs a local server (a process of its own, outside
the measured tree) answers with photos, in two configurations
(:data:`CONFIGURATIONS`, each flag of which the command line can change):

``store``
    issue 15's: the sample photos at 640 px, 336 px ``center_crop`` at JPEG
    quality 95, one attempt, 32 requests in flight (per host too), the
    default ``--seq-len`` and ``--tokens-per-image``.
``issue31``
    issue 31's user's: ``--image-size 336 --seq-len 2048 --tokens-per-image
    64 --per-host-concurrency 64 --per-host-rate 0`` and every other flag at
    its default, over 64 photos of 200-600 px on the long side (cached under
    ``benchmarks/out/photos/200-600``).
 The peak is of the whole process tree: the sum of the
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

from benchmarks.e2e import CORPORA, ENV, OUT, image_server, load, photo_dir, url_parquet  # noqa: E402


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


# The two configurations the script reports: issue 15's (the e2e benchmark's
# fetch flags at 336 px) and issue 31's (a user's, whose memory grew faster).
CONFIGURATIONS = {
    "store": dict(
        photos="small", image_size=336, resize_mode="center_crop", seq_len=None,
        tokens_per_image=None, fetch_concurrency=32, per_host_concurrency=32,
        samples_per_shard=None,
    ),
    "issue31": dict(
        photos="200-600", image_size=336, resize_mode=None, seq_len=2048,
        tokens_per_image=64, fetch_concurrency=None, per_host_concurrency=64,
        samples_per_shard=None,
    ),
}  # fmt: skip


def sized_photos(low: int, high: int, count: int = 64) -> str:
    """Cached JPEGs ``low``-``high`` px on the long side (``realistic_photo``'s
    grain, so they weigh what web photos of that size weigh); deterministic."""
    import numpy as np

    from tests.generated import realistic_photo

    directory = os.path.join(OUT, "photos", f"{low}-{high}")
    if (
        len(
            [n for n in os.listdir(directory) if n.endswith(".jpg")]
            if os.path.isdir(directory)
            else []
        )
        != count
    ):
        os.makedirs(directory, exist_ok=True)
        sides = np.random.default_rng(31).integers(low, high + 1, count)
        for index, side in enumerate(sides):
            with open(os.path.join(directory, f"{index:03d}.jpg"), "wb") as handle:
                handle.write(realistic_photo(index, int(side)))
    return directory


def photos(kind: str) -> str:
    if kind in ("small", "realistic"):
        return photo_dir(kind)
    low, high = (int(side) for side in kind.split("-"))
    return sized_photos(low, high)


def build_command(urls: str, output: str, settings: dict, workers: int) -> list[str]:
    """``corpora build coyo`` with ``settings`` (a flag left at ``None`` is not given)."""
    command = CORPORA + ["build", "coyo", "--input", urls, "--output", output]
    command += ["--workers", str(workers), "--per-host-rate", "0"]
    for name in ("image_size", "resize_mode", "seq_len", "tokens_per_image",
                 "fetch_concurrency", "per_host_concurrency", "samples_per_shard"):  # fmt: skip
        if settings[name] is not None:
            command += ["--" + name.replace("_", "-"), str(settings[name])]
    if settings["resize_mode"] is not None:  # issue 15's runs, as e2e.py runs them
        command += ["--jpeg-quality", "95", "--max-attempts", "1"]
    return command + ["--allow-private-urls", "--progress-every", "0"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--counts", type=int, nargs="+", default=[4000, 40000])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--config", choices=sorted(CONFIGURATIONS), nargs="+", default=sorted(CONFIGURATIONS),
        help="configurations to run (default: both); the flags below change them",
    )  # fmt: skip
    parser.add_argument("--photos", help="small, realistic or LOW-HIGH (px, long side)")
    for name in ("image_size", "seq_len", "tokens_per_image", "fetch_concurrency",
                 "per_host_concurrency", "samples_per_shard"):  # fmt: skip
        parser.add_argument("--" + name.replace("_", "-"), type=int)
    parser.add_argument("--resize-mode")
    parser.add_argument("--latency", type=float, default=0.0)
    args = parser.parse_args()
    os.makedirs(OUT, exist_ok=True)
    work = tempfile.mkdtemp(prefix="store-memory-")
    rows = []
    try:
        for config in args.config:
            settings = dict(CONFIGURATIONS[config])
            for name in settings:
                if getattr(args, name) is not None:
                    settings[name] = getattr(args, name)
            with image_server(photos(settings["photos"]), args.latency) as port:
                for count in args.counts:
                    urls = url_parquet(os.path.join(work, f"urls-{count}.parquet"), port, count)
                    for _ in range(args.repeats):
                        output = os.path.join(work, f"out-{count}")
                        shutil.rmtree(output, ignore_errors=True)
                        result = measure(build_command(urls, output, settings, args.workers))
                        with open(os.path.join(output, "manifest.json")) as handle:
                            manifest = json.load(handle)
                        result.update(
                            config=config,
                            settings=settings,
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
    print(
        "| config | images | ok | shard MB | wall s | peak tree RSS MiB (launcher; workers) "
        "| load before → after |"
    )
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        launcher, *others = row["peak_rss_mib_by_process"]
        print(
            f"| {row['config']} | {row['images']:,} | {row['ok']:,} | "
            f"{row['shard_bytes'] / 1e6:.0f} | {row['wall_s']:.0f} | "
            f"{row['peak_tree_rss_mib']:,.0f} ({launcher:.0f}; "
            f"{' + '.join(f'{v:.0f}' for v in others[: args.workers])}) | "
            f"{row['load_before'][0]} → {row['load_after'][0]} |"
        )
    for config in args.config:
        runs = [row for row in rows if row["config"] == config]
        small, large = runs[0], runs[-1]
        if large["images"] == small["images"]:
            continue
        ratio = large["peak_tree_rss_mib"] / small["peak_tree_rss_mib"]
        per_record = (
            (large["peak_tree_rss_mib"] - small["peak_tree_rss_mib"])
            * 2**20
            / (large["images"] - small["images"])
        )
        print(
            f"{config}: peak ratio {ratio:.2f} (target ≤ 1.3); "
            f"{per_record:,.0f} bytes per extra image"
        )


if __name__ == "__main__":
    main()
