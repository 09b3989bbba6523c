"""Dedup's cost: the same realistic-photo COYO build without dedup
(``--dedup-images off``, text dedup off) and with ``--dedup-images near
--dedup-text near``, side by side in one run (issue 26's acceptance).

    python benchmarks/dedup.py --counts 4000 10000 40000
    python benchmarks/dedup.py --counts 1000 --photos DIR --sides off exact near

The photos are distinct (:func:`distinct_photo`: a mosaic of tiles cut from
the bundled sample's photos, each tile its own crop, flip and grain, 500-2,000
px on the long side, 100-400 KB), so a near-duplicate rule finds only what was
planted: a share of the URLs (``--duplicates``, 10 % by default) serve an exact
copy or a quality-60 re-encoding of an earlier photo, as web corpora repeat
images. Both sides fetch every URL from a local server (50 ms latency); each
command is timed to its exit (wall and CPU seconds of its process tree, the
peak RSS of its largest process), the sides alternating run by run, and the
ratio is of the medians. The ``near`` side also removes the planted
duplicates, so it tokenizes and packs fewer records: the table gives the
records each side kept. ``--sides`` adds ``exact`` (the default build:
``--dedup-images exact``, text off). ``--photos DIR`` reads the photos from a
folder made by :func:`photo_dir` elsewhere (read only: it must hold them all).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import json
import multiprocessing
import os
import shutil
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from benchmarks.e2e import (  # noqa: E402
    OUT,
    alternate,
    coyo_command,
    load,
    median,
    run,
    url_parquet,
)


def serve(port_queue, latency: float, directory: str) -> None:
    """``/img/<i>.jpg``: photo ``i`` of ``directory``, read from disk per request
    (tens of thousands of photos are not held in memory)."""
    import http.server
    import time

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:
            pass

        def do_GET(self) -> None:
            time.sleep(latency)
            if self.path == "/robots.txt":
                body, kind = b"User-agent: *\nAllow: /\n", "text/plain"
            else:
                index = int(self.path.rsplit("/", 1)[-1].split(".")[0])
                with open(os.path.join(directory, f"{index:06d}.jpg"), "rb") as handle:
                    body, kind = handle.read(), "image/jpeg"
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    class Server(http.server.ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 1024

    httpd = Server(("127.0.0.1", 0), Handler)
    port_queue.put(httpd.server_address[1])
    httpd.serve_forever()


@contextlib.contextmanager
def image_server(directory: str, latency: float):
    ports = multiprocessing.Queue()
    server = multiprocessing.Process(target=serve, args=(ports, latency, directory), daemon=True)
    server.start()
    try:
        yield ports.get(timeout=120)
    finally:
        server.terminate()
        server.join()


@functools.lru_cache(maxsize=1)
def _sources() -> list:
    import glob

    import numpy as np
    from PIL import Image

    from corpora.config.bundled_sample import SAMPLE_IMAGES

    return [
        np.asarray(Image.open(p).convert("RGB"))
        for p in sorted(glob.glob(os.path.join(SAMPLE_IMAGES, "*.jpg")))
    ]


def distinct_photo(index: int) -> bytes:
    """A web-photo-sized JPEG whose perceptual hash is its own."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(1_000_003 + index)
    sources = _sources()
    long_side = int(rng.integers(500, 2001))
    width, height = long_side, int(long_side * rng.uniform(0.6, 1.0))
    grid = int(rng.integers(2, 5))
    canvas = np.zeros((height, width, 3), np.uint8)
    ys, xs = np.linspace(0, height, grid + 1, dtype=int), np.linspace(0, width, grid + 1, dtype=int)
    for row in range(grid):
        for col in range(grid):
            source = sources[int(rng.integers(len(sources)))]
            h, w = source.shape[:2]
            top, left = int(rng.integers(0, h // 3)), int(rng.integers(0, w // 3))
            tile = source[top : top + 2 * h // 3, left : left + 2 * w // 3]
            if rng.random() < 0.5:
                tile = tile[:, ::-1]
            size = (int(xs[col + 1] - xs[col]), int(ys[row + 1] - ys[row]))
            resized = np.asarray(Image.fromarray(np.ascontiguousarray(tile)).resize(size))
            canvas[ys[row] : ys[row + 1], xs[col] : xs[col + 1]] = resized
    grain = rng.integers(-6, 7, canvas.shape, dtype=np.int16)
    pixels = np.clip(canvas + grain, 0, 255).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "JPEG", quality=75)
    return buffer.getvalue()


def planted_kinds(count: int, duplicates: float) -> dict[int, tuple[str, int]]:
    """Which photos are duplicates, and of which earlier photo (the same for
    every ``count``: a smaller corpus is a prefix of a larger one)."""
    import numpy as np

    rng = np.random.default_rng(26)
    kinds = {}
    for index in range(count):
        draw, kind, of = rng.random(), rng.random(), rng.integers(max(1, index))
        if index > 10 and draw < duplicates:
            kinds[index] = ("exact" if kind < 0.5 else "near", int(of))
    return kinds


def photo_dir(count: int, duplicates: float) -> tuple[str, dict]:
    """A folder whose first ``count`` photos are the corpus (made once, kept);
    a ``duplicates`` share of them an exact copy or a quality-60 re-encoding
    of an earlier one."""
    from PIL import Image

    directory = os.path.join(OUT, "photos", f"distinct-{duplicates}")
    os.makedirs(directory, exist_ok=True)
    kinds = planted_kinds(count, duplicates)
    for index in range(count):
        path = os.path.join(directory, f"{index:06d}.jpg")
        if os.path.exists(path):
            continue
        if index in kinds:
            kind, of = kinds[index]
            data = _original(directory, of, kinds)
            if kind == "near":
                buffer = io.BytesIO()
                Image.open(io.BytesIO(data)).save(buffer, "JPEG", quality=60)
                data = buffer.getvalue()
        else:
            data = distinct_photo(index)
        with open(path + ".part", "wb") as handle:
            handle.write(data)
        os.rename(path + ".part", path)
    planted = {"exact": 0, "near": 0}
    for kind, _ in kinds.values():
        planted[kind] += 1
    return directory, planted


def given_photos(directory: str, count: int, duplicates: float) -> tuple[str, dict]:
    """A folder :func:`photo_dir` made elsewhere (with the same ``duplicates``),
    read only: its first ``count`` photos must all be there."""
    missing = [
        i for i in range(count) if not os.path.exists(os.path.join(directory, f"{i:06d}.jpg"))
    ]
    if missing:
        raise SystemExit(f"{directory} lacks {len(missing)} of the first {count} photos")
    planted = {"exact": 0, "near": 0}
    for kind, _ in planted_kinds(count, duplicates).values():
        planted[kind] += 1
    return directory, planted


def _original(directory: str, index: int, kinds: dict) -> bytes:
    while index in kinds:  # a copy of a copy: the photo it copies
        index = kinds[index][1]
    with open(os.path.join(directory, f"{index:06d}.jpg"), "rb") as handle:
        return handle.read()


# Each side's dedup flags: ``off`` is the build without dedup, ``near`` what the
# acceptance names, ``exact`` the default build.
SIDES = {
    "off": ["--dedup-images", "off"],
    "exact": ["--dedup-images", "exact"],
    "near": ["--dedup-images", "near", "--dedup-text", "near"],
}


def build(urls: str, work: str, args, mode: str) -> dict:
    output = os.path.join(work, f"out-{mode}")
    shutil.rmtree(output, ignore_errors=True)
    result = run(coyo_command(urls, output, args) + SIDES[mode])
    with open(os.path.join(output, "manifest.json")) as handle:
        manifest = json.load(handle)
    result.update(
        kept=manifest["funnel"]["kept"],
        dropped={k: v for k, v in manifest["funnel"]["dropped"].items() if "dup" in k},
    )
    shutil.rmtree(output)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--counts", type=int, nargs="+", default=[4000, 10000])
    parser.add_argument("--duplicates", type=float, default=0.1)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--sides", nargs="+", choices=tuple(SIDES), default=["off", "near"])
    parser.add_argument("--photos", help="a folder of photo_dir's photos, read only")
    args = parser.parse_args()
    if args.sides[0] != "off":
        parser.error("--sides: the first side is off (the ratios are to it)")
    work = os.path.join(OUT, "dedup")
    os.makedirs(work, exist_ok=True)
    rows = []
    for count in args.counts:
        if args.photos:
            directory, planted = given_photos(args.photos, count, args.duplicates)
        else:
            directory, planted = photo_dir(count, args.duplicates)
        with image_server(directory, args.latency) as port:
            urls = url_parquet(os.path.join(work, f"urls-{count}.parquet"), port, count)
            runs = alternate(
                {mode: (lambda m=mode: build(urls, work, args, m)) for mode in args.sides},
                args.repeats,
            )
        row = {"count": count, "planted": planted, "load": load()}
        for mode, results in runs.items():
            row[mode] = {key: median(results, key) for key in ("wall_s", "cpu_s", "peak_rss_mib")}
            row[mode].update(kept=results[0]["kept"], dropped=results[0]["dropped"])
            row[mode]["load_before"] = [r["load_before"] for r in results]
        for mode in args.sides[1:]:
            suffix = "" if mode == "near" else f"_{mode}"
            for key, figure in (("wall", "wall_s"), ("cpu", "cpu_s"), ("rss", "peak_rss_mib")):
                ratio = row[mode][figure] / row["off"][figure]
                row[f"ratio_{key}{suffix}"] = round(ratio, 3)
        rows.append(row)
        print(json.dumps(row), flush=True)
    if len(rows) > 1:
        first, last = rows[0], rows[-1]
        growth = {
            f"memory_growth_{mode}": round(
                last[mode]["peak_rss_mib"] / first[mode]["peak_rss_mib"], 3
            )
            for mode in args.sides
        }
        print(json.dumps({**growth, "from": first["count"], "to": last["count"]}))


if __name__ == "__main__":
    main()
