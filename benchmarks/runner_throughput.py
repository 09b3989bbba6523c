"""Per-core build throughput on DirectRunner, and how it scales with workers.

A generated MMC4-format corpus (each document: 3 sentences, 2 images) is
built as ``mmc4-pairs`` (one image + its sentence per record, the shape of a
COYO row) with images served by a local HTTP server, so the figure covers
read, fetch, decode, resize, tokenize, pack and shard writing, but not the
internet's latency. The baseline is one worker; the comparison is
``--workers`` N; the ratio is N-worker throughput over one-worker
throughput. Startup (worker processes, pipeline translation) is measured
left out by timing the corpus and its first half and taking the rate of the
difference: the steady rate a 700M-row build sees.

    PYTHONPATH=. python benchmarks/runner_throughput.py --pairs 2000 --workers 2
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from corpora.settings import mmc4_pairs  # noqa: E402
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
            path = info["raw_url"][len(server.base):]
            body = bodies[(number * 2 + index) % distinct]
            server.route(path, lambda handler, body=body: handler.send_body(200, body, "image/jpeg"))


def _run(docs_path: str, output: str, workers: int, tokenizer: str | None) -> tuple[float, dict]:
    shutil.rmtree(output, ignore_errors=True)
    overrides = {"tokenizer": tokenizer} if tokenizer else {}
    settings = mmc4_pairs((docs_path,), output, seq_len=2048, tokens_per_image=576,
                          samples_per_shard=100, pack_groups=max(1, workers), **overrides)
    settings = settings.replace(fetch=dataclasses.replace(settings.fetch, image_size=336, allow_private_urls=True))
    start = time.monotonic()
    outcome = execute(settings, RunnerSettings(workers=workers))
    return time.monotonic() - start, outcome.manifest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=2000, help="records (image + sentence) in the corpus")
    parser.add_argument("--workers", type=int, default=2, help="the comparison's worker processes")
    parser.add_argument("--image-side", type=int, default=512, help="source image width and height in pixels")
    parser.add_argument("--tokenizer", default=None, help="SentencePiece model (default: the bundled one)")
    args = parser.parse_args()

    work = tempfile.mkdtemp(prefix="corpora-bench-")
    try:
        with ImageServer() as server:
            docs = mmc4_documents(args.pairs // 2, server.base, images_per_doc=2, image_size=args.image_side)
            _serve_prepared(server, docs, args.image_side)
            corpus = write_mmc4(os.path.join(work, "docs.jsonl"), docs)
            half_corpus = write_mmc4(os.path.join(work, "half.jsonl"), docs[:len(docs) // 2])
            tiny = write_mmc4(os.path.join(work, "tiny.jsonl"), docs[:4])
            kept_half = len(docs) // 2 * 2  # every image is served, so every pair is kept
            rows = []
            _run(tiny, os.path.join(work, "warm"), 1, args.tokenizer)  # imports, tokenizer, first compile
            for workers in (1, args.workers):
                half, _ = _run(half_corpus, os.path.join(work, "half"), workers, args.tokenizer)
                seconds, manifest = _run(corpus, os.path.join(work, "out"), workers, args.tokenizer)
                kept = manifest["funnel"]["kept"]
                # The marginal rate between a corpus and its first half leaves out
                # startup (worker processes, pipeline translation), which a
                # 700M-row build pays once.
                if seconds <= half:
                    sys.exit(f"the full corpus took no longer than its half with {workers} worker(s) "
                             f"({seconds:.1f} s vs {half:.1f} s): startup noise dominates; use more --pairs")
                steady = (kept - kept_half) / (seconds - half)
                rows.append({"workers": workers, "pairs": kept, "seconds": round(seconds, 1),
                             "half_seconds": round(half, 1), "pairs_per_s": round(kept / seconds, 1),
                             "steady_pairs_per_s": round(steady, 1),
                             "steady_pairs_per_s_per_worker": round(steady / workers, 1),
                             "shard_bytes": manifest["totals"]["bytes"]})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    base, comparison = rows
    print(json.dumps(rows, indent=2))
    print(f"baseline (1 worker): {base['steady_pairs_per_s']} pairs/s; "
          f"{args.workers} workers: {comparison['steady_pairs_per_s']} pairs/s; "
          f"ratio {comparison['steady_pairs_per_s'] / base['steady_pairs_per_s']:.2f}x "
          f"on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
