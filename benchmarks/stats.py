"""What the statistics cost, side by side with what they ride on.

1. During a build, every packed sequence goes through
   ``sequence_values`` + ``StatsAccumulator.add`` on its way to its shard.
   Baseline: writing the same sequences as a shard (``write_shard``).
2. ``corpora stats`` reads the shards once. Baseline: reading them with
   ``iter_tar_samples`` and nothing else.

    PYTHONPATH=. python benchmarks/stats.py [--sequences 2000] [--seq-len 2048]

Synthetic mmc4-like documents (one 576-token image slot run per image, 1–4
images, 20–300 text tokens each, 16 KB JPEG-sized payloads per image) packed
with the project's packer. Prints seconds for each side and the ratio.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import tempfile
import time

import numpy as np

from corpora import reader, shards
from corpora.record import ImageChunk
from corpora.stats import figures as stats
from corpora.tokens import pack
from corpora.tokens.tokenizer import Span, TokenizedDocument

IMAGE_TOKEN, TOKENS_PER_IMAGE = 32000, 576


def documents(count: int, seed: int = 0):
    rng = random.Random(seed)
    payload = bytes(16 * 1024)
    for index in range(count):
        ids, spans, images = [1], [Span("bos", 0, 1)], []
        for k in range(rng.randint(1, 4)):
            spans.append(Span("image", len(ids), len(ids) + TOKENS_PER_IMAGE, k))
            ids += [IMAGE_TOKEN] * TOKENS_PER_IMAGE
            images.append(
                ImageChunk(
                    url=f"http://i/{index}/{k}",
                    data=payload,
                    scores={"matched_sim": rng.uniform(0.2, 0.4)},
                )
            )
            text = rng.randint(20, 300)
            spans.append(Span("text", len(ids), len(ids) + text))
            ids += [rng.randint(3, 31999) for _ in range(text)]
        spans.append(Span("eos", len(ids), len(ids) + 1))
        ids.append(2)
        provenance = {
            "id": f"d{index:07d}",
            "corpus": "mmc4",
            "images": [{"url": i.url, "scores": dict(i.scores)} for i in images],
        }
        yield TokenizedDocument(
            f"d{index:07d}",
            "mmc4",
            np.array(ids, dtype=np.int32),
            tuple(spans),
            tuple(images),
            provenance,
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sequences", type=int, default=2000)
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    sequences = []
    for sequence in pack.pack_greedy(documents(args.sequences * 2), args.seq_len, 0):
        sequences.append(sequence)
        if len(sequences) == args.sequences:
            break
    ids = stats.TokenIds(IMAGE_TOKEN, 1, 2, TOKENS_PER_IMAGE)

    def write() -> bytes:
        buffer = io.BytesIO()
        shards.write_shard(buffer, ((f"k{i:06d}", s) for i, s in enumerate(sequences)))
        return buffer.getvalue()

    def combine() -> None:
        acc = stats.StatsAccumulator()
        for s in sequences:
            acc.add(stats.sequence_values(s.input_ids, s.segment_ids, s.documents, ids))
        stats.finalize(acc, {"corpus": "mmc4"})

    def best(fn) -> float:
        times = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return min(times)

    data = write()
    t_write, t_combine = best(write), best(combine)

    with tempfile.TemporaryDirectory() as directory:
        with open(os.path.join(directory, "mmc4-000000.tar"), "wb") as handle:
            handle.write(data)
        manifest = {
            "corpus": "mmc4",
            "seq_len": args.seq_len,
            "tokens_per_image": TOKENS_PER_IMAGE,
            "image_token_id": IMAGE_TOKEN,
            "bos_id": 1,
            "eos_id": 2,
            "pad_id": 0,
            "shards": [{"path": "mmc4-000000.tar"}],
        }
        with open(os.path.join(directory, "manifest.json"), "w") as handle:
            json.dump(manifest, handle)

        def read_only() -> None:
            with open(os.path.join(directory, "mmc4-000000.tar"), "rb") as stream:
                for _ in reader.iter_tar_samples(stream):
                    pass

        t_read, t_stats = best(read_only), best(lambda: stats.stats_from_shards(directory))

    n = len(sequences)
    print(
        f"{n} sequences of {args.seq_len} tokens, shard {len(data) / 1e6:.1f} MB, "
        f"best of {args.repeat}"
    )
    print(
        f"during the build: write_shard {t_write:.3f} s | statistics {t_combine:.3f} s | "
        f"statistics / write = {t_combine / t_write:.2f}"
    )
    print(
        f"corpora stats:    read shards {t_read:.3f} s | read + statistics {t_stats:.3f} s | "
        f"ratio = {t_stats / t_read:.2f}"
    )


if __name__ == "__main__":
    main()
