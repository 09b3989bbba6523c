"""Shard writing and per-sequence statistics, against the code they replaced (issue 17).

    python benchmarks/shard_write.py [--sequences 1000] [--seq-len 2048]

Both sides run in one process on the same packed sequences, alternating, and
the ratio is of medians:

1. ``write_shard`` (USTAR members and ``.npy`` headers built directly) against
   ``tarfile`` in ``"w|"`` mode with ``np.save`` per array, as it was written
   before; the two shards' bytes are checked equal first.
2. ``sequence_values`` (one pass over the segment runs) against full-length
   masks and ``np.isin`` per segment; the values are checked equal first.

Sequences: C4-like text documents (log-normal token counts, median 260,
sigma 0.95, BOS and EOS each, no images; ``--images`` adds one 576-token image
slot run and a 16 KB payload to every document) packed in order (``pack_greedy``).
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import tarfile
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from corpora import shards  # noqa: E402
from corpora.record import ImageChunk  # noqa: E402
from corpora.stats import figures as stats  # noqa: E402
from corpora.tokens import pack  # noqa: E402
from corpora.tokens.tokenizer import Span, TokenizedDocument  # noqa: E402
from tests.corpora.stats.test_figures import reference_sequence_values  # noqa: E402  (the code before)

IMAGE_TOKEN, TOKENS_PER_IMAGE = 32000, 576


def documents(count: int, images: bool, seed: int = 0):
    rng = np.random.default_rng(seed)
    for index in range(count):
        text = max(8, int(rng.lognormal(np.log(260), 0.95)))
        ids, spans, chunks = [1], [Span("bos", 0, 1)], []
        if images:
            spans.append(Span("image", 1, 1 + TOKENS_PER_IMAGE, 0))
            ids += [IMAGE_TOKEN] * TOKENS_PER_IMAGE
            chunks.append(ImageChunk(url=f"http://i/{index}", data=bytes(16 * 1024)))
        spans.append(Span("text", len(ids), len(ids) + text))
        ids += rng.integers(3, 31999, text).tolist()
        spans.append(Span("eos", len(ids), len(ids) + 1))
        ids.append(2)
        provenance = {"id": f"d{index:07d}", "corpus": "c4"}
        if images:
            provenance["images"] = [{"url": f"http://i/{index}", "scores": {"matched_sim": 0.3}}]
        yield TokenizedDocument(
            f"d{index:07d}", "c4", np.array(ids, np.int32), tuple(spans), tuple(chunks), provenance
        )


def tarfile_shard(stream, samples) -> None:
    """The writer before issue 17: tarfile's members, np.save's arrays."""

    def np_save(array) -> bytes:
        buffer = io.BytesIO()
        np.save(buffer, array, allow_pickle=False)
        return buffer.getvalue()

    with tarfile.open(fileobj=stream, mode="w|", format=tarfile.USTAR_FORMAT) as tar:
        for key, sequence in samples:
            files = [(f"{n}.npy", np_save(getattr(sequence, n))) for n in shards.ARRAYS]
            files += [(f"img{i:03d}.jpg", data) for i, data in enumerate(sequence.images)]
            files.append(("json", shards.json_bytes({"documents": list(sequence.documents)})))
            for extension, data in files:
                info = tarfile.TarInfo(f"{key}.{extension}")
                info.size = len(data)
                info.mtime = 0
                info.mode = 0o444
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                tar.addfile(info, io.BytesIO(data))
            tar.members.clear()


def median_times(functions: dict, repeat: int) -> dict[str, float]:
    times: dict[str, list[float]] = {name: [] for name in functions}
    for _ in range(repeat):
        for name, function in functions.items():  # alternating, so load hits both sides alike
            start = time.perf_counter()
            function()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sequences", type=int, default=1000)
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--images", action="store_true")
    args = parser.parse_args()

    sequences = []
    for sequence in pack.pack_greedy(documents(args.sequences * 20, args.images), args.seq_len, 0):
        sequences.append(sequence)
        if len(sequences) == args.sequences:
            break
    samples = [(shards.sample_key("c4", 0, i), s) for i, s in enumerate(sequences)]
    ids = stats.TokenIds(IMAGE_TOKEN, 1, 2, TOKENS_PER_IMAGE)

    def write_new() -> bytes:
        buffer = io.BytesIO()
        shards.write_shard(buffer, samples)
        return buffer.getvalue()

    def write_old() -> bytes:
        buffer = io.BytesIO()
        tarfile_shard(buffer, samples)
        return buffer.getvalue()

    def values(function):
        return lambda: [function(s.input_ids, s.segment_ids, s.documents, ids) for s in sequences]

    values_new, values_old = values(stats.sequence_values), values(reference_sequence_values)
    data = write_new()
    assert data == write_old(), "the shards differ"
    assert values_new() == values_old(), "the statistics differ"

    pieces = sum(len(s.documents) for s in sequences)
    print(
        f"{len(sequences)} sequences of {args.seq_len} tokens, {pieces / len(sequences):.1f} "
        f"documents each, shard {len(data) / 1e6:.1f} MB; median of {args.repeat}; "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    t = median_times({"write old": write_old, "write new": write_new}, args.repeat)
    print(
        f"write_shard:     tarfile + np.save {t['write old']:.3f} s | "
        f"direct {t['write new']:.3f} s | speed-up {t['write old'] / t['write new']:.1f}x"
    )
    t = median_times({"old": values_old, "new": values_new}, args.repeat)
    print(
        f"sequence_values: masks + np.isin {t['old']:.3f} s | "
        f"one pass {t['new']:.3f} s | speed-up {t['old'] / t['new']:.1f}x"
    )


if __name__ == "__main__":
    main()
