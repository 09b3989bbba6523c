"""Per-core build throughput on DirectRunner, and how it scales with workers.

A generated MMC4-format corpus (each document: 3 sentences, 2 images) is
built as ``mmc4-pairs`` (one image + its sentence per record, the shape of a
COYO row) with images served by a local HTTP server, so the figure covers
read, fetch, decode, resize, tokenize, pack and shard writing, but not the
internet's latency. The baseline is one worker; the comparison is
``--workers`` N; the ratio is N-worker throughput over one-worker
throughput. Startup (worker processes, pipeline translation) is measured
left out by timing the corpus and its first half and taking the rate of the
difference: the steady rate a 700M-row build sees. On a shared machine wall
time is noisy, so each size runs ``--repeats`` times and the fastest counts,
and CPU-seconds per record (this process, its threads and its worker
processes) are reported too: that figure does not depend on what else runs.

    PYTHONPATH=. python benchmarks/runner_throughput.py --pairs 2000 --workers 2
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from corpora.config.settings import corpus_settings  # noqa: E402
from pipelines.launch import execute  # noqa: E402
from pipelines.runners import RunnerSettings  # noqa: E402
from tests.generated import mmc4_documents, write_mmc4  # noqa: E402
from tests.servers import ImageServer, image_bytes  # noqa: E402


def _serve_prepared(server: ImageServer, docs: list[dict], side: int, distinct: int = 32) -> None:
    """Answer every image URL from memory (a few distinct JPEGs), so the
    server costs little CPU next to the build."""
    bodies = [image_bytes(side, side, f"bench{i}") for i in range(distinct)]
    for number, doc in enumerate(docs):
        for index, info in enumerate(doc["image_info"]):
            path = info["raw_url"][len(server.base) :]
            body = bodies[(number * 2 + index) % distinct]
            server.route(
                path, lambda handler, body=body: handler.send_body(200, body, "image/jpeg")
            )


def _cpu_seconds() -> float:
    """CPU time of this process (its threads, the image server's included)
    and of its finished children (DirectRunner's worker processes)."""
    own, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _run(
    docs_path: str, output: str, workers: int, tokenizer: str | None
) -> tuple[float, float, dict]:
    shutil.rmtree(output, ignore_errors=True)
    overrides = {"tokenizer": tokenizer} if tokenizer else {}
    settings = corpus_settings(
        "mmc4-pairs",
        (docs_path,),
        output,
        seq_len=2048,
        tokens_per_image=576,
        samples_per_shard=100,
        pack_groups=max(1, workers),
        **overrides,
    )
    settings = settings.replace(
        fetch=dataclasses.replace(settings.fetch, image_size=336, allow_private_urls=True)
    )
    start, cpu = time.monotonic(), _cpu_seconds()
    outcome = execute(settings, RunnerSettings(workers=workers))
    return time.monotonic() - start, _cpu_seconds() - cpu, outcome.manifest


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--pairs", type=int, default=2000, help="records (image + sentence) in the corpus"
    )
    parser.add_argument("--workers", type=int, default=2, help="the comparison's worker processes")
    parser.add_argument(
        "--repeats", type=int, default=3, help="runs of each size; the fastest counts"
    )
    parser.add_argument(
        "--image-side", type=int, default=512, help="source image width and height in pixels"
    )
    parser.add_argument(
        "--tokenizer", default=None, help="SentencePiece model (default: the bundled one)"
    )
    args = parser.parse_args()

    work = tempfile.mkdtemp(prefix="corpora-bench-")
    rows = []
    try:
        with ImageServer() as server:
            docs = mmc4_documents(
                args.pairs // 2, server.base, images_per_doc=2, image_size=args.image_side
            )
            _serve_prepared(server, docs, args.image_side)
            corpus = write_mmc4(os.path.join(work, "docs.jsonl"), docs)
            half_corpus = write_mmc4(os.path.join(work, "half.jsonl"), docs[: len(docs) // 2])
            tiny = write_mmc4(os.path.join(work, "tiny.jsonl"), docs[:4])
            _run(
                tiny, os.path.join(work, "warm"), 1, args.tokenizer
            )  # imports, tokenizer, first compile
            for workers in (1, args.workers):
                halves = [
                    _run(half_corpus, os.path.join(work, "half"), workers, args.tokenizer)
                    for _ in range(args.repeats)
                ]
                fulls = [
                    _run(corpus, os.path.join(work, "out"), workers, args.tokenizer)
                    for _ in range(args.repeats)
                ]
                kept, kept_half = fulls[0][2]["funnel"]["kept"], halves[0][2]["funnel"]["kept"]
                # The difference between the corpus and its first half leaves out
                # start-up (worker processes, pipeline translation), which a
                # 700M-row build pays once; the fastest of the repeats is the one
                # least disturbed by other work on the machine.
                wall = min(f[0] for f in fulls) - min(h[0] for h in halves)
                cpu = min(f[1] for f in fulls) - min(h[1] for h in halves)
                rows.append(
                    {
                        "workers": workers,
                        "pairs": kept,
                        "half_pairs": kept_half,
                        "full_seconds": [round(f[0], 1) for f in fulls],
                        "half_seconds": [round(h[0], 1) for h in halves],
                        "steady_pairs_per_s": round((kept - kept_half) / wall, 1)
                        if wall > 0
                        else None,
                        "pairs_per_cpu_second": round((kept - kept_half) / cpu, 1)
                        if cpu > 0
                        else None,
                        "shard_bytes": fulls[0][2]["totals"]["bytes"],
                    }
                )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(rows, indent=2))
    base, comparison = rows
    ratio = (
        f"{comparison['steady_pairs_per_s'] / base['steady_pairs_per_s']:.2f}x"
        if base["steady_pairs_per_s"] and comparison["steady_pairs_per_s"]
        else "n/a (noise)"
    )
    print(
        f"baseline (1 worker): {base['steady_pairs_per_s']} pairs/s, "
        f"{base['pairs_per_cpu_second']} pairs per "
        f"CPU-second; {args.workers} workers: {comparison['steady_pairs_per_s']} pairs/s, "
        f"{comparison['pairs_per_cpu_second']} pairs per CPU-second; ratio {ratio} "
        f"on {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}"
    )


if __name__ == "__main__":
    main()
