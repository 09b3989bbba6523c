"""Image fetch throughput: our fetch stage against img2dataset, side by side.

    python benchmarks/fetch.py                  # 2,000 and 20,000 URLs, 64 threads, 50 ms latency
    python benchmarks/fetch.py --urls 500 --scale 4 --latency 0.02

A local HTTP server (its own process) serves real photographs (the bundled
sample images, scaled to 640 px wide) and waits ``--latency`` seconds before
each response, like a far-away host. Both sides get the same URL list, the
same number of threads, the same resize settings (256 px, center_crop, JPEG
quality 95), write their JPEGs into tar files, and run in a fresh process
each, which reports its peak memory (max RSS of it and its children).

Ours: :class:`corpora.fetch.Fetcher` (the core of the Beam fetch stage) with
``concurrency`` = threads. Every URL is on one host, and img2dataset has no
per-host politeness, so ours runs with the per-host caps lifted
(``per_host_concurrency`` = threads, ``per_host_rate`` = 0) and with the
address guard let through for loopback; the opt-out check stays on for both.
img2dataset: ``img2dataset.download`` with ``processes_count=1``,
``thread_count`` = threads, ``output_format="webdataset"``, EXIF extraction
off (ours does not extract EXIF), everything else default.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import http.server
import io
import json
import multiprocessing
import os
import resource
import subprocess
import sys
import tarfile
import tempfile
import time

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IMAGE_SIZE, RESIZE_MODE, QUALITY = 256, "center_crop", 95


def _photos() -> list[bytes]:
    from PIL import Image

    photos = []
    for path in sorted(
        glob.glob(os.path.join(REPO, "corpora", "data", "sample", "images", "*.jpg"))
    ):
        image = Image.open(path).convert("RGB")
        image = image.resize((640, round(image.height * 640 / image.width)), Image.LANCZOS)
        buffer = io.BytesIO()
        image.save(buffer, "JPEG", quality=90)
        photos.append(buffer.getvalue())
    return photos


# What the benchmark host answers to /robots.txt: a real file to parse, which
# allows every image (corpora asks for it once per host and worker).
ROBOTS_TXT = b"User-agent: *\nDisallow: /private/\nAllow: /img/\n"


def serve(port_queue, latency: float, photo_dir: str | None = None) -> None:
    """Serve ``/img/<i>.jpg`` as photo ``i`` modulo their number: the JPEGs in
    ``photo_dir`` (sorted by name) or, without one, the 640 px sample photos;
    and ``/robots.txt`` (:data:`ROBOTS_TXT`)."""
    if photo_dir is None:
        photos = _photos()
    else:
        photos = []
        for path in sorted(glob.glob(os.path.join(photo_dir, "*.jpg"))):
            with open(path, "rb") as handle:
                photos.append(handle.read())

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:
            pass

        def do_GET(self) -> None:
            time.sleep(latency)
            if self.path == "/robots.txt":
                body, kind = ROBOTS_TXT, "text/plain"
            else:
                index = int(self.path.rsplit("/", 1)[-1].split(".")[0])
                body, kind = photos[index % len(photos)], "image/jpeg"
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    class Server(http.server.ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 1024

        def handle_error(self, request, client_address) -> None:
            pass

    httpd = Server(("127.0.0.1", 0), Handler)
    port_queue.put(httpd.server_address[1])
    httpd.serve_forever()


def peak_rss_mib() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(own, children) / 1024


def run_ours(url_file: str, out: str, threads: int) -> dict:
    sys.path.insert(0, REPO)
    from corpora.fetch import Fetcher, FetchSettings
    from corpora.fetch.image import resizer

    settings = FetchSettings(
        image_size=IMAGE_SIZE,
        resize_mode=RESIZE_MODE,
        jpeg_quality=QUALITY,
        concurrency=threads,
        per_host_concurrency=threads,
        per_host_rate=0,
        allow_private_urls=True,
        progress_interval=0,
        max_attempts=1,
    )
    resizer(
        settings
    )  # import OpenCV/albumentations before the clock starts, as img2dataset's side does
    ok = failed = 0
    started = time.perf_counter()
    with (
        open(url_file) as urls,
        Fetcher(settings) as fetcher,
        tarfile.open(os.path.join(out, "ours.tar"), "w") as tar,
    ):
        for index, (url, outcome) in enumerate(fetcher.fetch(line.strip() for line in urls)):
            if not outcome.ok:
                failed += 1
                continue
            ok += 1
            member = tarfile.TarInfo(f"{index:09d}.jpg")
            member.size = len(outcome.data)
            tar.addfile(member, io.BytesIO(outcome.data))
            hashlib.sha256(outcome.data).hexdigest()
    return {"ok": ok, "failed": failed, "seconds": time.perf_counter() - started}


def run_img2dataset(url_file: str, out: str, threads: int) -> dict:
    import contextlib

    from img2dataset import download

    started = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        download(
            url_list=url_file,
            input_format="txt",
            output_folder=os.path.join(out, "i2d"),
            output_format="webdataset",
            processes_count=1,
            thread_count=threads,
            image_size=IMAGE_SIZE,
            resize_mode=RESIZE_MODE,
            encode_quality=QUALITY,
            extract_exif=False,
            timeout=10,
            retries=0,
        )
    seconds = time.perf_counter() - started
    ok = failed = 0
    for path in glob.glob(os.path.join(out, "i2d", "*_stats.json")):
        with open(path) as handle:
            stats = json.load(handle)
        ok += stats["successes"]
        failed += stats["count"] - stats["successes"]
    return {"ok": ok, "failed": failed, "seconds": seconds}


def child(side: str, url_file: str, threads: int) -> None:
    with tempfile.TemporaryDirectory(prefix=f"bench-fetch-{side}-") as out:
        result = (run_ours if side == "ours" else run_img2dataset)(url_file, out, threads)
    result["peak_rss_mib"] = peak_rss_mib()
    print(json.dumps(result))


def measure(side: str, url_file: str, threads: int) -> dict:
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--child", side, url_file, str(threads)],
        capture_output=True,
        text=True,
        env=env,
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines or not lines[-1].startswith("{"):
        raise SystemExit(
            f"{side} failed (exit {done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
        )
    return json.loads(lines[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--urls", type=int, default=2000, help="N: URLs in the first run")
    parser.add_argument(
        "--scale", type=int, default=10, help="the second run has N x scale URLs (0: skip)"
    )
    parser.add_argument("--threads", type=int, default=64)
    parser.add_argument(
        "--latency", type=float, default=0.05, help="seconds the server waits per request"
    )
    parser.add_argument(
        "--child", nargs=3, metavar=("SIDE", "URL_FILE", "THREADS"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.child:
        child(args.child[0], args.child[1], int(args.child[2]))
        return

    ports = multiprocessing.Queue()
    server = multiprocessing.Process(target=serve, args=(ports, args.latency), daemon=True)
    server.start()
    port = ports.get(timeout=60)
    load = os.getloadavg()
    print(
        f"fetch benchmark: {args.threads} threads each, "
        f"server latency {args.latency * 1000:.0f} ms, "
        f"{IMAGE_SIZE} px {RESIZE_MODE}, JPEG q{QUALITY}; {os.cpu_count()} cores, "
        f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="bench-fetch-") as work:
            sizes = [args.urls] + ([args.urls * args.scale] if args.scale else [])
            for n in sizes:
                url_file = os.path.join(work, f"urls-{n}.txt")
                with open(url_file, "w") as handle:
                    handle.writelines(f"http://127.0.0.1:{port}/img/{i}.jpg\n" for i in range(n))
                results = {
                    side: measure(side, url_file, args.threads) for side in ("img2dataset", "ours")
                }
                rows.append((n, results))
                print_table(rows[-1:], header=len(rows) == 1)
    finally:
        server.terminate()
    if len(rows) == 2:
        growth = {
            side: rows[1][1][side]["peak_rss_mib"] / rows[0][1][side]["peak_rss_mib"]
            for side in ("ours", "img2dataset")
        }
        print(
            f"peak memory at {rows[1][0]:,} vs {rows[0][0]:,} URLs: ours x{growth['ours']:.2f}, "
            f"img2dataset x{growth['img2dataset']:.2f}"
        )
    load = os.getloadavg()
    print(f"load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


def print_table(rows, header: bool) -> None:
    if header:
        print(
            f"{'URLs':>8} | {'img2dataset img/s':>17} | {'ours img/s':>10} | {'ratio':>5} | "
            f"{'i2d peak MiB':>12} | {'ours peak MiB':>13} | ok (i2d/ours)"
        )
    for n, results in rows:
        i2d, ours = results["img2dataset"], results["ours"]
        rate_i2d = i2d["ok"] / i2d["seconds"]
        rate_ours = ours["ok"] / ours["seconds"]
        print(
            f"{n:>8,} | {rate_i2d:>17.1f} | {rate_ours:>10.1f} | {rate_ours / rate_i2d:>5.2f} | "
            f"{i2d['peak_rss_mib']:>12.0f} | {ours['peak_rss_mib']:>13.0f} | "
            f"{i2d['ok']}/{ours['ok']}",
            flush=True,
        )


if __name__ == "__main__":
    main()
