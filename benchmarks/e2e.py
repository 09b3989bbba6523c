"""Whole commands, side by side: what a user of ``corpora`` waits for.

    python benchmarks/e2e.py            # images 2k/10k/20k URLs, text 20k/200k documents, start-up
    python benchmarks/e2e.py --quick    # the same sections on small inputs (a few minutes)
    python benchmarks/e2e.py --only images --photos realistic --image-counts 2000

Every figure is a fresh process tree started the way a user starts it, timed
from launch to exit; the two sides alternate run by run (A B, then B A …) so
a change in the machine's load falls on both, and the ratio is of the
medians. CPU is user + system time of the whole process tree (``wait4`` on
the command: it and every descendant it waited for, Beam's and img2dataset's
worker processes included); the image server runs in a process of its own,
outside both trees.

images
    ``corpora build coyo`` against ``img2dataset`` on the same COYO-schema
    parquet of URLs, served by a local server (its own process) that waits
    50 ms before each response, like a far-away host. ``realistic`` photos
    are 500-2,000 px JPEGs of 100-400 KB (``tests.generated.realistic_photo``,
    cached under ``benchmarks/out/photos/``); ``small`` ones are the sample
    photos at 640 px (36-145 KB), as ``benchmarks/fetch.py`` serves them.
    Equal concurrency: ``--workers`` processes x ``--concurrency`` requests on
    both sides (img2dataset: ``processes_count`` x ``thread_count``, the URL
    list cut into two shards per process so that every process has work);
    corpora's per-host caps lifted (every URL is on one host; img2dataset has
    none) and loopback let through its address guard; both resize to 224 px
    ``center_crop`` at JPEG quality 95, make one attempt per URL, respect
    opt-out headers and compute sha256; img2dataset skips EXIF (corpora
    extracts none). CPU per image is also fitted over the URL counts (the
    slope of CPU seconds against images), which leaves start-up out.
bare
    The limit on this machine: decode + resize + encode of the same photos
    in one process and one thread: img2dataset's resizer (what img2dataset
    runs per image) against corpora's ``process_image`` (header checks
    included) at full size (byte-equal output) and with the reduced-size
    decode of ``corpora.fetch.jpeg_draft``; CPU ms per image.
text
    ``corpora build c4`` against a plain Python loop (SentencePiece
    ``encode`` per document, tokens cut into ``seq_len`` rows, ``np.save``
    per 1,000 rows; a process of its own too) on one C4-format
    ``.json.gz`` of C4-like documents (``benchmarks/pack.c4_like_texts``),
    the bundled tokenizer unless ``--tokenizer`` names a model (``bpe8k``:
    the 8k BPE model of ``benchmarks/pack.py``). Then ``corpora build c4``
    of the first of those files with ``--workers 1`` against ``--workers``
    (two by default): whether one input file gains from more workers.
startup
    ``corpora --help``; ``corpora build mmc4-pairs --smoke`` on the bundled
    sample with the default workers (one, in the ``corpora`` process: the
    input is small), 1 and 2 workers; and what ``--help`` imports, by
    top-level package (``python -X importtime``).

Results: ``benchmarks/out/e2e-<time>.json`` (every run, with the load
average before and after) and a markdown table on stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import gzip
import json
import math
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")

from benchmarks.fetch import _photos, serve  # noqa: E402

OUT = os.path.join(REPO, "benchmarks", "out")
IMAGE_SIZE, RESIZE_MODE, QUALITY = 224, "center_crop", 95
REALISTIC_PHOTOS = 64
# The `corpora` console script, run from this checkout.
CORPORA = [
    sys.executable,
    "-c",
    "import sys; sys.argv[0] = 'corpora'; from cli.main import main; main()",
]
ENV = dict(
    os.environ,
    PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""),
    NO_ALBUMENTATIONS_UPDATE="1",
)


# ---------------------------------------------------------------- running a command


def load() -> list[float]:
    return [round(value, 2) for value in os.getloadavg()]


def run(command: list[str], timeout: float = 7200) -> dict:
    """Wall and CPU seconds of ``command``'s process tree, and its peak RSS."""
    before = load()
    with tempfile.TemporaryFile() as stderr:
        started = time.perf_counter()
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr, env=ENV)
        deadline = started + timeout
        while True:
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                process.kill()
                pid, status, usage = os.wait4(process.pid, 0)
                break
            time.sleep(0.05)
        wall = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)
        if process.returncode != 0:
            stderr.seek(0)
            tail = stderr.read()[-3000:].decode("utf-8", "replace")
            raise SystemExit(f"failed (exit {process.returncode}): {' '.join(command)}\n{tail}")
    return {
        "wall_s": round(wall, 3),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
        "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
        "load_before": before,
        "load_after": load(),
    }


def alternate(sides: dict[str, Callable[[], dict]], repeats: int) -> dict[str, list[dict]]:
    """Run each side ``repeats`` times, the order flipped every round."""
    names = list(sides)
    runs: dict[str, list[dict]] = {name: [] for name in names}
    for round_ in range(repeats):
        for name in names if round_ % 2 == 0 else reversed(names):
            result = sides[name]()
            runs[name].append(result)
            print(f"    {name}: {json.dumps(result)}", file=sys.stderr, flush=True)
    return runs


def median(runs: list[dict], key: str) -> float:
    return statistics.median(run[key] for run in runs)


# ---------------------------------------------------------------- images


def photo_dir(kind: str) -> str:
    """Cached photos of ``kind`` (generated once; deterministic)."""
    directory = os.path.join(OUT, "photos", kind)
    count = (
        REALISTIC_PHOTOS
        if kind == "realistic"
        else len(glob.glob(os.path.join(REPO, "corpora", "data", "sample", "images", "*.jpg")))
    )
    if len(glob.glob(os.path.join(directory, "*.jpg"))) != count:
        os.makedirs(directory, exist_ok=True)
        if kind == "realistic":
            from tests.generated import realistic_photo

            photos = [realistic_photo(index) for index in range(count)]
        else:
            photos = _photos()
        for index, data in enumerate(photos):
            with open(os.path.join(directory, f"{index:03d}.jpg"), "wb") as handle:
                handle.write(data)
    return directory


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


def url_parquet(path: str, port: int, count: int) -> str:
    """A COYO-schema parquet whose rows pass corpora's default metadata filter."""
    from tests.fixtures import write_coyo_parquet

    rows = [
        {
            "id": index,
            "url": f"http://127.0.0.1:{port}/img/{index}.jpg",
            "text": f"a photograph, number {index}, taken on a bright day",
            "width": 1000,
            "height": 750,
            "clip_similarity_vitb32": 0.34,
            "clip_similarity_vitl14": 0.31,
            "nsfw_score_opennsfw2": 0.01,
            "nsfw_score_gantman": 0.02,
        }
        for index in range(count)
    ]
    return write_coyo_parquet(path, rows, row_group_size=1000)


def coyo_command(urls: str, output: str, args) -> list[str]:
    return (
        CORPORA
        + ["build", "coyo", "--input", urls, "--output", output]
        + ["--image-size", str(IMAGE_SIZE), "--resize-mode", RESIZE_MODE]
        + ["--jpeg-quality", str(QUALITY), "--workers", str(args.workers)]
        + ["--fetch-concurrency", str(args.concurrency)]
        + ["--per-host-concurrency", str(args.concurrency), "--per-host-rate", "0"]
        + ["--allow-private-urls", "--max-attempts", "1", "--progress-every", "0"]
    )


def corpora_coyo(urls: str, work: str, args) -> dict:
    output = os.path.join(work, "corpora-out")
    shutil.rmtree(output, ignore_errors=True)
    result = run(coyo_command(urls, output, args))
    with open(os.path.join(output, "manifest.json")) as handle:
        images = json.load(handle)["images"]
    result.update(ok=images["ok"], failed=sum(images["failed"].values()))
    shutil.rmtree(output)
    return result


def img2dataset_command(urls: str, output: str, count: int, args) -> list[str]:
    per_shard = max(1, math.ceil(count / (2 * args.workers)))
    return (
        ["img2dataset", "--url_list", urls, "--input_format", "parquet"]
        + ["--url_col", "url", "--caption_col", "text", "--output_folder", output]
        + ["--output_format", "webdataset", "--processes_count", str(args.workers)]
        + ["--thread_count", str(args.concurrency), "--image_size", str(IMAGE_SIZE)]
        + ["--resize_mode", RESIZE_MODE, "--encode_quality", str(QUALITY)]
        + ["--extract_exif", "False", "--timeout", "10", "--retries", "0"]
        + ["--number_sample_per_shard", str(per_shard)]
    )


def img2dataset(urls: str, work: str, count: int, args) -> dict:
    output = os.path.join(work, "i2d-out")
    shutil.rmtree(output, ignore_errors=True)
    result = run(img2dataset_command(urls, output, count, args))
    ok = failed = 0
    for path in glob.glob(os.path.join(output, "*_stats.json")):
        with open(path) as handle:
            stats = json.load(handle)
        ok += stats["successes"]
        failed += stats["count"] - stats["successes"]
    result.update(ok=ok, failed=failed)
    shutil.rmtree(output)
    return result


def bench_images(kind: str, counts: list[int], args, work: str) -> list[dict]:
    rows = []
    with image_server(photo_dir(kind), args.latency) as port:
        for count in counts:
            print(f"  images: {count:,} {kind} photos", file=sys.stderr, flush=True)
            urls = url_parquet(os.path.join(work, f"urls-{kind}-{count}.parquet"), port, count)
            runs = alternate(
                {
                    "img2dataset": lambda: img2dataset(urls, work, count, args),
                    "corpora": lambda: corpora_coyo(urls, work, args),
                },
                args.repeats,
            )
            for side, side_runs in runs.items():
                for one in side_runs:
                    one["images_per_s"] = round(one["ok"] / one["wall_s"], 2)
                    one["cpu_ms_per_image"] = round(1000 * one["cpu_s"] / max(1, one["ok"]), 2)
            rows.append({"photos": kind, "urls": count, "runs": runs})
    return rows


def cpu_slope(rows: list[dict], side: str) -> float | None:
    """Least-squares CPU ms per image over the URL counts (start-up left out)."""
    points = [(median(r["runs"][side], "ok"), median(r["runs"][side], "cpu_s")) for r in rows]
    if len({x for x, _ in points}) < 2:
        return None
    mean_x = statistics.fmean(x for x, _ in points)
    mean_y = statistics.fmean(y for _, y in points)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / sum(
        (x - mean_x) ** 2 for x, _ in points
    )
    return round(1000 * slope, 2)


# ---------------------------------------------------------------- bare decode + resize + encode


def bench_bare(kind: str, repeats: int) -> dict:
    """CPU ms per image of decode + resize + encode, one process, one thread:
    img2dataset's resizer (what img2dataset runs per image), and corpora's
    ``process_image`` (header checks included) at full size and with the
    reduced-size decode."""
    import io

    from img2dataset.resizer import ResizeMode, Resizer
    from PIL import Image

    from corpora.fetch import FetchSettings, process_image
    from corpora.fetch.jpeg_draft import reduced_scale

    resizer = Resizer(
        image_size=IMAGE_SIZE,
        resize_mode=ResizeMode[RESIZE_MODE],
        resize_only_if_bigger=False,
        encode_quality=QUALITY,
        encode_format="jpg",
    )
    settings = FetchSettings(image_size=IMAGE_SIZE, resize_mode=RESIZE_MODE, jpeg_quality=QUALITY)
    photos = []
    for path in sorted(glob.glob(os.path.join(photo_dir(kind), "*.jpg"))):
        with open(path, "rb") as handle:
            photos.append(handle.read())

    work = {
        "img2dataset": lambda data: resizer(io.BytesIO(data)),
        "full_decode": lambda data: process_image(data, settings, reduced_decode=False),
        "reduced_decode": lambda data: process_image(data, settings),
    }
    result = {"photos": kind, "count": len(photos)}
    times: dict[str, list[float]] = {name: [] for name in work}
    for name in work:
        work[name](photos[0])  # imports and first-call set-up outside the clock
    for round_ in range(repeats):  # alternating, as the whole commands do
        for name in list(work) if round_ % 2 == 0 else reversed(list(work)):
            started = time.process_time()
            for data in photos:
                work[name](data)
            times[name].append(1000 * (time.process_time() - started) / len(photos))
    for name, values in times.items():
        result[f"{name}_ms"] = round(statistics.median(values), 2)
    with_scale = 0
    for data in photos:
        width, height = Image.open(io.BytesIO(data)).size
        with_scale += reduced_scale(width, height, IMAGE_SIZE, RESIZE_MODE) > 1
    result["reduced_share"] = round(with_scale / len(photos), 2)
    return result


# ---------------------------------------------------------------- text


# Past this many documents the C4-like texts are generated in parts of this
# many (each with its own seed), so that 2,000,000 documents never sit in memory.
TEXT_PART = 200_000


def c4_texts(count: int):
    """``count`` C4-like texts (``benchmarks.pack.c4_like_texts``), streamed in
    parts of :data:`TEXT_PART` past that many (the first part is the
    200,000-document file's texts)."""
    from benchmarks.pack import SEED, c4_like_texts

    if count <= TEXT_PART:
        yield from c4_like_texts(count)
        return
    for part, first in enumerate(range(0, count, TEXT_PART)):
        yield from c4_like_texts(min(TEXT_PART, count - first), seed=SEED + part)


def c4_file(count: int) -> str:
    """One C4-format .json.gz of ``count`` C4-like documents (cached)."""
    path = os.path.join(OUT, "c4", f"c4-train.{count:08d}.json.gz")
    if not os.path.exists(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        partial = path + ".partial"
        with gzip.open(partial, "wt", encoding="utf-8", compresslevel=1) as handle:
            for index, text in enumerate(c4_texts(count)):
                record = {
                    "text": text,
                    "timestamp": "2019-04-25T12:57:54Z",
                    "url": f"https://example.org/c4/{index}",
                }
                handle.write(json.dumps(record) + "\n")
        os.replace(partial, path)
    return path


def tokenizer_path(name: str | None) -> str | None:
    if name in (None, "bundled"):
        return None
    if name == "bpe8k":
        from benchmarks.pack import larger_tokenizer

        directory = os.path.join(OUT, "tokenizers")
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, "bpe8k.model")
        if not os.path.exists(path):
            made = larger_tokenizer(directory)
            if made is None:
                raise SystemExit(
                    "--tokenizer bpe8k needs timm's WordNet glosses (pip install timm)"
                )
        return path
    return os.path.abspath(name)


def plain_loop(input_path: str, output: str, tokenizer: str, seq_len: int) -> None:
    """The baseline: SentencePiece encode per document, cut rows, np.save."""
    import numpy as np
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_file=tokenizer)
    eos = processor.eos_id()
    tokens: list[int] = []
    rows: list[list[int]] = []
    part = 0
    with gzip.open(input_path, "rt", encoding="utf-8") as handle:
        for line in handle:
            tokens.extend(processor.encode(json.loads(line)["text"]))
            tokens.append(eos)
            while len(tokens) >= seq_len:
                rows.append(tokens[:seq_len])
                del tokens[:seq_len]
            if len(rows) >= 1000:  # a long document can add several rows at once
                np.save(os.path.join(output, f"{part:06d}.npy"), np.array(rows, np.int32))
                rows, part = [], part + 1
    if rows:
        np.save(os.path.join(output, f"{part:06d}.npy"), np.array(rows, np.int32))


def loop_command(source: str, output: str, tokenizer: str | None, args) -> list[str]:
    from corpora.config.bundled_sample import SAMPLE_TOKENIZER

    return [sys.executable, os.path.abspath(__file__), "--plain-loop", source, output] + [
        tokenizer or SAMPLE_TOKENIZER,
        str(args.seq_len),
    ]


def c4_command(
    source: str, output: str, tokenizer: str | None, args, workers: int | None = None
) -> list[str]:
    return (
        CORPORA
        + ["build", "c4", "--input", source, "--output", output]
        + ["--seq-len", str(args.seq_len), "--workers", str(workers or args.workers)]
        + ["--progress-every", "0"]
        + (["--tokenizer", tokenizer] if tokenizer else [])
    )


def bench_text(counts: list[int], args, work: str) -> list[dict]:
    tokenizer = tokenizer_path(args.tokenizer)
    rows = []
    for count in counts:
        print(f"  text: {count:,} documents", file=sys.stderr, flush=True)
        source = c4_file(count)

        def loop() -> dict:
            output = os.path.join(work, "loop-out")
            shutil.rmtree(output, ignore_errors=True)
            os.makedirs(output)
            result = run(loop_command(source, output, tokenizer, args))
            shutil.rmtree(output)
            return result

        def ours() -> dict:
            output = os.path.join(work, "c4-out")
            shutil.rmtree(output, ignore_errors=True)
            result = run(c4_command(source, output, tokenizer, args))
            with open(os.path.join(output, "manifest.json")) as handle:
                result["documents"] = json.load(handle)["funnel"]["kept"]
            shutil.rmtree(output)
            return result

        runs = alternate({"plain loop": loop, "corpora": ours}, args.repeats)
        for side_runs in runs.values():
            for one in side_runs:
                one["documents_per_s"] = round(count / one["wall_s"], 1)
        rows.append({"documents": count, "tokenizer": args.tokenizer or "bundled", "runs": runs})
    return rows


def bench_workers(count: int, args, work: str) -> dict:
    """``corpora build c4`` of one file of ``count`` documents, one worker
    against ``args.workers``."""
    tokenizer = tokenizer_path(args.tokenizer)
    source = c4_file(count)
    print(f"  text: one file of {count:,} documents, workers", file=sys.stderr, flush=True)

    def build(workers: int) -> dict:
        output = os.path.join(work, f"c4-workers-{workers}")
        shutil.rmtree(output, ignore_errors=True)
        result = run(c4_command(source, output, tokenizer, args, workers))
        shutil.rmtree(output)
        return result

    sides = {"1 worker": lambda: build(1), f"{args.workers} workers": lambda: build(args.workers)}
    return {"documents": count, "runs": alternate(sides, args.repeats)}


# ---------------------------------------------------------------- start-up


def import_costs(top: int = 12) -> dict:
    """What ``corpora --help`` imports: self time summed by top-level package."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "from cli.main import main"],
        capture_output=True,
        text=True,
        env=ENV,
        cwd=REPO,
    )
    by_package: dict[str, int] = {}
    total = 0
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "[us]" in line:
            continue
        self_us, cumulative_us, name = (part.strip() for part in line[12:].split("|"))
        package = name.split(".")[0]
        by_package[package] = by_package.get(package, 0) + int(self_us)
        total += int(self_us)
    ranked = sorted(by_package.items(), key=lambda item: -item[1])[:top]
    return {
        "total_ms": round(total / 1000, 1),
        "by_package_ms": {name: round(us / 1000, 1) for name, us in ranked},
    }


def bench_startup(args, work: str) -> dict:
    print("  start-up", file=sys.stderr, flush=True)
    helps = [run(CORPORA + ["--help"]) for _ in range(max(3, args.repeats))]

    def smoke(workers: int | None) -> dict:
        output = os.path.join(work, f"smoke-{workers}")
        shutil.rmtree(output, ignore_errors=True)
        result = run(
            CORPORA
            + ["build", "mmc4-pairs", "--smoke", "--output", output, "--progress-every", "0"]
            + (["--workers", str(workers)] if workers else [])
        )
        shutil.rmtree(output)
        return result

    smokes = alternate(
        {
            "default workers": lambda: smoke(None),
            "1 worker": lambda: smoke(1),
            "2 workers": lambda: smoke(2),
        },
        args.repeats,
    )
    return {"help": helps, "smoke": smokes, "imports": import_costs()}


# ---------------------------------------------------------------- report


def table(results: dict) -> str:
    lines = [
        "| whole command | baseline | corpora | ratio (medians) |",
        "|---|---|---|---|",
    ]
    for row in results.get("images", []):
        i2d, ours = row["runs"]["img2dataset"], row["runs"]["corpora"]
        rate_i2d, rate_ours = median(i2d, "images_per_s"), median(ours, "images_per_s")
        loads = [one["load_before"][0] for one in i2d + ours]
        lines.append(
            f"| {row['urls']:,} {row['photos']} photo URLs, images/s "
            f"(ok {median(i2d, 'ok'):.0f} / {median(ours, 'ok'):.0f}; "
            f"load {min(loads):.1f}-{max(loads):.1f}) | "
            f"img2dataset {rate_i2d:.1f} | {rate_ours:.1f} | {rate_ours / rate_i2d:.2f} |"
        )
        cpu_i2d, cpu_ours = median(i2d, "cpu_ms_per_image"), median(ours, "cpu_ms_per_image")
        lines.append(
            f"| same, CPU ms per image (start-up included; lower is better) | "
            f"{cpu_i2d:.1f} | {cpu_ours:.1f} | {cpu_ours / cpu_i2d:.2f} |"
        )
    for kind, slopes in results.get("cpu_per_image_fit", {}).items():
        if slopes["img2dataset"] and slopes["corpora"]:
            lines.append(
                f"| CPU ms per image, fit over the {kind} URL counts (lower is better) | "
                f"{slopes['img2dataset']:.1f} | {slopes['corpora']:.1f} | "
                f"{slopes['corpora'] / slopes['img2dataset']:.2f} |"
            )
    for bare in results.get("bare", []):
        base = bare["img2dataset_ms"]
        lines.append(
            f"| bare decode + resize + encode, one thread, {bare['photos']} photos, CPU ms "
            f"per image, full decode (byte-equal output) | img2dataset's resizer {base:.1f} | "
            f"{bare['full_decode_ms']:.1f} | {bare['full_decode_ms'] / base:.2f} |"
        )
        lines.append(
            f"| same, reduced-size decode ({bare['reduced_share']:.0%} of the photos reduced) | "
            f"{base:.1f} | {bare['reduced_decode_ms']:.1f} | "
            f"{bare['reduced_decode_ms'] / base:.2f} |"
        )
    for row in results.get("text", []):
        loop, ours = row["runs"]["plain loop"], row["runs"]["corpora"]
        rate_loop, rate_ours = median(loop, "documents_per_s"), median(ours, "documents_per_s")
        loads = [one["load_before"][0] for one in loop + ours]
        lines.append(
            f"| {row['documents']:,} C4-like documents, {row['tokenizer']} tokenizer, "
            f"documents/s (load {min(loads):.1f}-{max(loads):.1f}) | plain loop "
            f"{rate_loop:,.0f} | {rate_ours:,.0f} | {rate_ours / rate_loop:.2f} |"
        )
        cpu_loop, cpu_ours = median(loop, "cpu_s"), median(ours, "cpu_s")
        lines.append(
            f"| same, CPU s (user + sys, every process; lower is better) | {cpu_loop:.1f} | "
            f"{cpu_ours:.1f} | {cpu_ours / cpu_loop:.2f} |"
        )
        wall_loop, wall_ours = median(loop, "wall_s"), median(ours, "wall_s")
        lines.append(
            f"| same, wall s (corpora minus the plain loop: {wall_ours - wall_loop:+.1f} s) | "
            f"{wall_loop:.1f} | {wall_ours:.1f} | |"
        )
        lines.append(
            f"| same, peak memory of one process, MiB | {median(loop, 'peak_rss_mib'):,.0f} | "
            f"{median(ours, 'peak_rss_mib'):,.0f} | |"
        )
    workers = results.get("text_workers")
    if workers:
        (one, one_runs), (many, many_runs) = workers["runs"].items()
        wall_one, wall_many = median(one_runs, "wall_s"), median(many_runs, "wall_s")
        lines.append(
            f"| one file of {workers['documents']:,} C4-like documents, wall s "
            f"(lower is better) | {one} {wall_one:.1f} | {many} {wall_many:.1f} | "
            f"{wall_many / wall_one:.2f} |"
        )
    startup = results.get("startup")
    if startup:
        lines.append(f"| `corpora --help`, s | | {median(startup['help'], 'wall_s'):.2f} | |")
        for name, runs in startup["smoke"].items():
            lines.append(
                f"| `corpora build mmc4-pairs --smoke`, {name}, s | | "
                f"{median(runs, 'wall_s'):.2f} | |"
            )
        imports = startup["imports"]
        top = ", ".join(f"{name} {ms:.0f}" for name, ms in imports["by_package_ms"].items())
        lines.append(
            f"| imports of `corpora --help`, ms (self time by package) | | "
            f"{imports['total_ms']:.0f} | |"
        )
        lines.append(f"\nImports by package (ms): {top}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small inputs (a few minutes)")
    parser.add_argument(
        "--only",
        action="append",
        choices=("images", "bare", "text", "startup"),
        help="run only these sections (repeatable; default: all)",
    )
    parser.add_argument("--photos", action="append", choices=("realistic", "small"))
    parser.add_argument("--image-counts", type=int, nargs="+", help="URL counts per photo kind")
    parser.add_argument("--text-counts", type=int, nargs="+", help="document counts")
    parser.add_argument("--repeats", type=int, default=2, help="runs per side (at least 2)")
    parser.add_argument(
        "--no-workers-check",
        action="store_true",
        help="text: leave out the one-file build on 1 worker against --workers",
    )
    parser.add_argument("--workers", type=int, default=2, help="processes on each side")
    parser.add_argument("--concurrency", type=int, default=64, help="requests per process")
    parser.add_argument("--latency", type=float, default=0.05, help="server seconds per request")
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--tokenizer", help="a SentencePiece model, 'bundled' or 'bpe8k'")
    parser.add_argument("--plain-loop", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.plain_loop:
        source, output, tokenizer, seq_len = args.plain_loop
        plain_loop(source, output, tokenizer, int(seq_len))
        return
    if args.repeats < 2:
        parser.error("--repeats must be at least 2 (a median of one run is no median)")
    sections = args.only or ["images", "bare", "text", "startup"]
    kinds = args.photos or ["realistic", "small"]
    image_counts = args.image_counts or ([300] if args.quick else [2000, 10000, 20000])
    text_counts = args.text_counts or ([5000] if args.quick else [20000, 200000])

    results: dict = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "machine": {"cores": os.cpu_count(), "load_before": load()},
        "settings": {
            "workers": args.workers,
            "concurrency": args.concurrency,
            "latency_s": args.latency,
            "image_size": IMAGE_SIZE,
            "resize_mode": RESIZE_MODE,
            "jpeg_quality": QUALITY,
            "seq_len": args.seq_len,
            "repeats": args.repeats,
        },
    }
    os.makedirs(OUT, exist_ok=True)
    print(
        f"e2e benchmark: {os.cpu_count()} cores, load average {' '.join(map(str, load()))}",
        file=sys.stderr,
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="e2e-", dir=OUT) as work:
        if "images" in sections:
            results["images"] = []
            results["cpu_per_image_fit"] = {}
            for kind in kinds:
                rows = bench_images(kind, image_counts, args, work)
                results["images"] += rows
                results["cpu_per_image_fit"][kind] = {
                    side: cpu_slope(rows, side) for side in ("img2dataset", "corpora")
                }
        if "bare" in sections:
            results["bare"] = [bench_bare(kind, args.repeats) for kind in kinds]
        if "text" in sections:
            results["text"] = bench_text(text_counts, args, work)
            if not args.no_workers_check:
                results["text_workers"] = bench_workers(text_counts[0], args, work)
        if "startup" in sections:
            results["startup"] = bench_startup(args, work)
    results["machine"]["load_after"] = load()
    path = os.path.join(OUT, f"e2e-{time.strftime('%Y%m%d-%H%M%S')}.json")
    with open(path, "w") as handle:
        json.dump(results, handle, indent=1)
    print(table(results))
    print(
        f"\nload average before {results['machine']['load_before']}, "
        f"after {results['machine']['load_after']}; every run: {os.path.relpath(path, REPO)}"
    )


if __name__ == "__main__":
    main()
