"""What the image store costs a first build, and what it saves a rebuild.

    python benchmarks/store_cost.py                      # 2,000 images, 3 rounds
    python benchmarks/store_cost.py --count 1000 --repeats 2

Three sides of ``corpora build coyo`` (DirectRunner) on one COYO-schema
parquet of URLs, served by a local server in a process of its own that waits
``--latency`` seconds before each response, like a far-away host:

- ``no store``: ``--no-image-store`` (every image fetched, none kept);
- ``store``: the default store under the output, written as the build fetches;
- ``rebuild``: another output with ``--image-store`` pointing at the last
  ``store`` run's store and another ``--seq-len``: every image read back from
  the store, no request.

The sides alternate round by round (the order flipped every round) so a
change in the machine's load falls on all of them; ratios are of medians.
Issue 15's target: ``no store`` / ``store`` wall time ≥ 0.9.

Results: ``benchmarks/out/store-cost-<time>.json`` and a table on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from benchmarks.e2e import (  # noqa: E402
    OUT,
    alternate,
    coyo_command,
    image_server,
    median,
    photo_dir,
    run,
    url_parquet,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--latency", type=float, default=0.05)
    args = parser.parse_args()
    os.makedirs(OUT, exist_ok=True)
    work = tempfile.mkdtemp(prefix="store-cost-")
    store = os.path.join(work, "store-out", "image-store")

    def side(name: str, *flags: str, keep: bool = False):
        def go() -> dict:
            output = os.path.join(work, f"{name}-out")
            shutil.rmtree(output, ignore_errors=True)
            result = run(coyo_command(urls, output, args) + list(flags))
            with open(os.path.join(output, "manifest.json")) as handle:
                manifest = json.load(handle)
            result.update(ok=manifest["images"]["ok"], arrived=manifest.get("images_arrived"))
            if not keep:  # the store run's output holds the store the rebuilds read
                shutil.rmtree(output)
            return result

        return go

    first_with_store = side("store", keep=True)

    try:
        with image_server(photo_dir("small"), args.latency) as port:
            urls = url_parquet(os.path.join(work, "urls.parquet"), port, args.count)
            first_with_store()  # a store for the first rebuild (and a warm page cache)
            runs = alternate(
                {
                    "no store": side("nostore", "--no-image-store"),
                    "store": first_with_store,
                    "rebuild": side("rebuild", "--image-store", store, "--seq-len", "1024"),
                },
                args.repeats,
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    with open(os.path.join(OUT, f"store-cost-{stamp}.json"), "w") as handle:
        json.dump({"args": vars(args), "runs": runs}, handle, indent=2)
    walls = {name: median(rows, "wall_s") for name, rows in runs.items()}
    cpus = {name: median(rows, "cpu_s") for name, rows in runs.items()}
    loads = [r["load_before"][0] for rows in runs.values() for r in rows]
    print("| side | median wall s | median CPU s | ok images |")
    print("|---|---|---|---|")
    for name, rows in runs.items():
        print(f"| {name} | {walls[name]:.1f} | {cpus[name]:.1f} | {rows[-1]['ok']:,} |")
    print(
        f"\nno store / store wall: {walls['no store'] / walls['store']:.2f} (target ≥ 0.9); "
        f"rebuild / first build with the store: {walls['rebuild'] / walls['store']:.2f}; "
        f"load average {min(loads)}–{max(loads)}"
    )


if __name__ == "__main__":
    main()
