"""A fetch worker's peak memory against the URLs it has fetched: 20,000 against
200,000 URLs, a fifth of them repeats (issue 31's bounded fetch index).

    python benchmarks/fetch_index.py                     # 20,000 and 200,000 URLs
    python benchmarks/fetch_index.py --counts 2000 20000

What one fetch worker of a build runs, in a fresh process per count: the
fetch stage's :class:`corpora.store.fetching.StoreFetch` over a
:class:`corpora.fetch.Fetcher`, with an image store in a temporary folder,
fed batches of ``--batch`` URLs as ``pipelines.transforms.FetchImages`` feeds
it, committing after each. One URL in five repeats a URL of an earlier batch
(chosen with a fixed seed), so the worker must find it in its index (the
store's rows and what it added since) and read it back from the store
rather than ask again. A local server (a process of its own, outside the
measured one) answers every ``/img/<i>.jpg`` with one 32 x 32 JPEG, so the
figure is the index's and the fetcher's, not the images'. The worker
reports its own peak (``VmHWM``, the high-water mark of its resident set,
which the machine's load does not change) and CPU seconds (user + system).

Results: ``benchmarks/out/fetch-index-<time>.json`` and a table on stdout.
"""

from __future__ import annotations

import argparse
import io
import json
import multiprocessing
import os
import random
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
OUT = os.path.join(REPO, "benchmarks", "out")
SPLIT = "urls.parquet"


def url_list(port: int, count: int, repeats: float, batch: int, seed: int = 0) -> list[str]:
    """``count`` URLs: each batch's first ``repeats`` share repeat URLs of
    earlier batches; the rest are new."""
    rng = random.Random(seed)
    urls: list[str] = []
    new = 0
    for start in range(0, count, batch):
        size = min(batch, count - start)
        again = round(size * repeats) if start else 0
        urls.extend(urls[rng.randrange(start)] for _ in range(again))
        for _ in range(size - again):
            urls.append(f"http://127.0.0.1:{port}/img/{new}.jpg")
            new += 1
    return urls


def _status(name: str) -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(name):
                return int(line.split()[1]) * 1024
    return 0


def worker(port: int, count: int, repeats: float, batch: int, concurrency: int) -> dict:
    """One fetch worker's run (in this process); its figures."""
    from corpora.fetch import Fetcher, FetchSettings
    from corpora.store.fetching import StoreFetch
    from corpora.store.settings import StoreSettings

    urls = url_list(port, count, repeats, batch)
    settings = FetchSettings(
        image_size=16,
        resize_mode="center_crop",
        concurrency=concurrency,
        per_host_concurrency=concurrency,
        per_host_rate=0,
        allow_private_urls=True,
        max_attempts=1,
        progress_interval=0,
        decode_threads=1,
    )
    arrived: dict[str, int] = {}
    ok = 0
    with tempfile.TemporaryDirectory(prefix="fetch-index-") as store:
        fetcher = Fetcher(settings)
        through = StoreFetch(StoreSettings(uri=os.path.join(store, "image-store")), fetcher)
        started, cpu = time.perf_counter(), os.times()
        after_first = 0
        for start in range(0, count, batch):
            wanted = dict.fromkeys(urls[start : start + batch], SPLIT)
            for _, outcome, arrival in through.fetch(wanted):
                arrived[arrival] = arrived.get(arrival, 0) + 1
                ok += outcome.ok
            through.commit()
            if not start:
                after_first = _status("VmRSS:")
        indexed = len(through.index(SPLIT))
        through.close()
        fetcher.close()
        wall, cpu_end = time.perf_counter() - started, os.times()
    return {
        "urls": count,
        "distinct": len(set(urls)),
        "indexed": indexed,
        "ok": ok,
        "arrived": arrived,
        "peak_rss_mib": round(_status("VmHWM:") / 2**20, 1),
        "rss_after_first_batch_mib": round(after_first / 2**20, 1),
        "cpu_s": round(cpu_end.user - cpu.user + cpu_end.system - cpu.system, 1),
        "wall_s": round(wall, 1),
    }


def tiny_jpeg_dir() -> str:
    from PIL import Image

    directory = tempfile.mkdtemp(prefix="fetch-index-photo-")
    buffer = io.BytesIO()
    Image.new("RGB", (32, 32), (120, 160, 200)).save(buffer, "JPEG", quality=90)
    with open(os.path.join(directory, "000.jpg"), "wb") as handle:
        handle.write(buffer.getvalue())
    return directory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--counts", type=int, nargs="+", default=[20_000, 200_000])
    parser.add_argument("--repeats", type=float, default=0.2, help="share of repeated URLs")
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--worker", nargs=2, type=int, metavar=("PORT", "COUNT"), help="internal")
    args = parser.parse_args()
    if args.worker:
        port, count = args.worker
        print(json.dumps(worker(port, count, args.repeats, args.batch, args.concurrency)))
        return

    from benchmarks.fetch import serve

    os.makedirs(OUT, exist_ok=True)
    ports: multiprocessing.Queue = multiprocessing.Queue()
    server = multiprocessing.Process(target=serve, args=(ports, 0.0, tiny_jpeg_dir()), daemon=True)
    server.start()
    rows = []
    try:
        port = ports.get(timeout=120)
        for count in args.counts:
            load = os.getloadavg()
            command = [sys.executable, __file__, "--worker", str(port), str(count)]
            command += ["--repeats", str(args.repeats), "--batch", str(args.batch)]
            command += ["--concurrency", str(args.concurrency)]
            done = subprocess.run(command, capture_output=True, text=True, check=True)
            row = json.loads(done.stdout.strip().splitlines()[-1])
            row["load_before"], row["load_after"] = load[0], os.getloadavg()[0]
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    finally:
        server.terminate()
        server.join()
    stamp = time.strftime("%Y%m%dT%H%M%S")
    with open(os.path.join(OUT, f"fetch-index-{stamp}.json"), "w") as handle:
        json.dump({"args": vars(args), "runs": rows}, handle, indent=2)
    print("| URLs | distinct | from the store | peak RSS MiB | CPU s | wall s | load |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['urls']:,} | {row['distinct']:,} | {row['arrived'].get('store', 0):,} | "
            f"{row['peak_rss_mib']:.0f} | {row['cpu_s']:.0f} | {row['wall_s']:.0f} | "
            f"{row['load_before']:.1f} → {row['load_after']:.1f} |"
        )
    if len(rows) > 1:
        print(f"\npeak ratio {rows[-1]['peak_rss_mib'] / rows[0]['peak_rss_mib']:.2f} (≤ 1.3)")


if __name__ == "__main__":
    main()
