"""Packing benchmark: our best-fit packer side by side with its baselines.

    python benchmarks/pack.py            # all three parts, about a minute
    python benchmarks/pack.py --quick    # smaller inputs

1. Packing efficiency (non-padding tokens / all tokens) of ``corpora.tokens.pack.pack``
   (best-fit decreasing over a bounded buffer) against seqio-style greedy
   packing (one open sequence, documents in order) on a C4-like document
   length distribution, at ``seq_len`` 512 and 2048.
2. Tokenize + pack throughput against bare SentencePiece encoding of the
   same text (one ``encode`` call per text, one thread, on both sides).
3. Peak memory (peak RSS, VmHWM, of a fresh process) of pack + shard writing at 1x
   and 10x the input, streamed from a generator.
4. MMC4-like documents (each image before its sentence) split by the rule that
   keeps an image with its text, against the rule before it (a cut after an
   image, ``_cut_points_before`` here): packing efficiency, pieces that end in
   an image slot, images with their text in the same piece.

C4-like lengths: log-normal token counts with median 260 and sigma 0.95
(mean about 410 tokens, C4 en's average with a T5-size vocabulary), at
least 8 tokens. The figures go in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
import time
from typing import Iterator

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from corpora import shards  # noqa: E402
from corpora.config.bundled_sample import SAMPLE_TOKENIZER  # noqa: E402
from corpora.record import Document, TextChunk  # noqa: E402
from corpora.tokens import pack  # noqa: E402
from corpora.tokens.tokenizer import Span, TokenizedDocument, Tokenizer, tokenize_document  # noqa: E402

SEED = 0


def c4_lengths(count: int, seed: int = SEED) -> Iterator[int]:
    """C4-like token counts, drawn in blocks so that memory does not grow with ``count``."""
    rng = np.random.default_rng(seed)
    for start in range(0, count, 4096):
        block = rng.lognormal(np.log(260), 0.95, min(4096, count - start))
        yield from np.maximum(8, block).astype(int).tolist()


def synthetic_docs(count: int, seed: int = SEED):
    """Text-only tokenized documents with C4-like lengths (streamed)."""
    for i, length in enumerate(c4_lengths(count, seed)):
        ids = np.full(length, 7, np.int32)
        ids[0], ids[-1] = 1, 2
        spans = (Span("bos", 0, 1), Span("text", 1, length - 1), Span("eos", length - 1, length))
        yield TokenizedDocument(
            f"doc{i:08d}", "c4", ids, spans, (), {"id": f"doc{i:08d}", "corpus": "c4"}
        )


def efficiency(sequences) -> tuple[float, int]:
    used = total = count = 0
    for s in sequences:
        used += int((s.segment_ids > 0).sum())
        total += s.segment_ids.shape[0]
        count += 1
    return used / total, count


def bench_efficiency(count: int) -> None:
    print(
        f"## Packing efficiency: {count} C4-like documents "
        f"(mean {np.mean(list(c4_lengths(count))):.0f} tokens, seed {SEED})"
    )
    print("| seq_len | greedy (seqio-style) | best-fit (ours) | sequences greedy / ours |")
    print("|---|---|---|---|")
    for seq_len in (512, 2048):
        greedy, n_greedy = efficiency(pack.pack_greedy(synthetic_docs(count), seq_len, 0))
        ours, n_ours = efficiency(pack.pack(synthetic_docs(count), seq_len, 0))
        print(f"| {seq_len} | {greedy:.2%} | {ours:.2%} | {n_greedy} / {n_ours} |")


def _cut_points_before(spans, seq_len: int) -> list[int]:
    """The split rule before issue 24, kept here as the baseline: a cut at a
    span that does not fit, wherever it falls, so an image can close a piece
    and its sentence open the next."""
    cuts, start = [0], 0
    for span in spans:
        if span.end - start <= seq_len:
            continue
        if span.kind == "image":
            start = span.start
            cuts.append(start)
            continue
        if span.start > start and span.end - span.start <= seq_len:
            start = span.start
            cuts.append(start)
            continue
        while span.end - start > seq_len:
            start += seq_len
            cuts.append(start)
    return cuts


def mmc4_like_docs(count: int, tokens_per_image: int, seed: int = SEED):
    """Tokenized MMC4-like documents: 1 + Poisson(3) images (mean 4.0 a
    document, VILA's Table 2), each before a sentence; sentences of
    log-normal length (median 25 tokens), about 120 text tokens per image."""
    rng = np.random.default_rng(seed)
    for i in range(count):
        images = 1 + int(rng.poisson(3))
        sentences = images + int(rng.poisson(images * 3))
        with_image = set(rng.choice(sentences, images, replace=False).tolist())
        ids, spans, chunks = [1], [Span("bos", 0, 1)], []
        for sentence in range(sentences):
            if sentence in with_image:
                start = len(ids)
                ids += [1000] * tokens_per_image
                spans.append(Span("image", start, len(ids), len(chunks)))
                chunks.append(None)
            start = len(ids)
            ids += [7] * max(1, int(rng.lognormal(np.log(25), 0.8)))
            spans.append(Span("text", start, len(ids)))
        spans.append(Span("eos", len(ids), len(ids) + 1))
        ids.append(2)
        yield f"mmc4-{i:07d}", np.array(ids, np.int32), tuple(spans)


def bench_mmc4_splits(count: int) -> None:
    print(f"## MMC4-like documents: {count} documents, 4.0 images each on average, seed {SEED}")
    print(
        "| seq_len, tokens/image | rule | packing efficiency | sequences | split documents "
        "| pieces ending in an image slot | images with their text in the piece |"
    )
    print("|---|---|---|---|---|---|---|")
    for seq_len, tokens_per_image in ((2048, 576), (2048, 64), (128, 16)):
        for rule in ("before (cut after an image)", "issue 24 (image with its text)"):
            refs, ending, with_text, images, split = [], 0, 0, 0, 0
            for key, ids, spans in mmc4_like_docs(count, tokens_per_image):
                if rule.startswith("before") and ids.shape[0] > seq_len:
                    cuts = _cut_points_before(spans, seq_len) + [ids.shape[0]]
                    n = len(cuts) - 1
                    doc = [
                        pack.PieceRef(key, i, n, a, b)
                        for i, (a, b) in enumerate(zip(cuts, cuts[1:]))
                    ]
                else:
                    doc = pack.plan_document(key, ids.shape[0], spans, seq_len)
                split += len(doc) > 1
                refs += doc
                slots = ids == 1000
                for ref in doc:
                    ending += bool(slots[ref.end - 1])
                    piece = slots[ref.start : ref.end]
                    images += int(piece.sum()) // tokens_per_image
                    # slots followed, in the piece, by a text token
                    after = np.flatnonzero(~piece)
                    for run_end in np.flatnonzero(piece[:-1] & ~piece[1:]) + 1:
                        if ids[ref.start + run_end] not in (1, 2):
                            run = run_end - (
                                after[after < run_end][-1] + 1 if (after < run_end).any() else 0
                            )
                            with_text += run // tokens_per_image
            used, bins = 0, 0
            for sequence in pack.pack_plan(refs, seq_len):
                used += sum(r.length for r in sequence)
                bins += 1
            print(
                f"| {seq_len}, {tokens_per_image} | {rule} | {used / (bins * seq_len):.2%} | "
                f"{bins} | {split} | {ending} | {with_text / images:.2%} |"
            )


def c4_like_texts(count: int, seed: int = SEED) -> list[str]:
    """Texts of C4-like lengths made of real sentences' words."""
    import gzip
    import json

    path = os.path.join(ROOT, "tests", "data", "upstream", "c4-train.00000-of-01024.first3.json.gz")
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        words = " ".join(json.loads(line)["text"] for line in handle).split()
    rng = np.random.default_rng(seed)
    texts = []
    for length in c4_lengths(count, seed):
        start = int(rng.integers(0, len(words)))
        n = max(1, int(length * 0.75))  # about 4 tokens per 3 words
        texts.append(
            " ".join(
                (words[start:] + words)[:n]
                if n <= len(words)
                else (words * (n // len(words) + 1))[:n]
            )
        )
    return texts


def larger_tokenizer(directory: str) -> tuple[str, str] | None:
    """A BPE model with an 8k vocabulary (Llama-2's kind of model, a quarter of
    its vocabulary), trained on WordNet glosses shipped with timm when present:
    the bundled sample model has only 1000 pieces and encodes unrealistically
    fast."""
    try:
        import timm
    except ImportError:
        return None
    glosses = os.path.join(
        os.path.dirname(timm.__file__), "data", "_info", "imagenet_synset_to_definition.txt"
    )
    if not os.path.exists(glosses):
        return None
    from corpora.tokens.training import train_sentencepiece

    with open(glosses, encoding="utf-8") as handle:
        texts = [line.split("\t", 1)[-1].strip() for line in handle]
    path = os.path.join(directory, "bpe8k.model")
    train_sentencepiece(texts, path, vocab_size=8000, model_type="bpe")
    return path, "8k BPE trained on WordNet glosses (timm)"


def bench_throughput(count: int, seq_len: int = 2048, repeats: int = 3) -> None:
    import tempfile

    texts = c4_like_texts(count)
    docs = [
        Document(f"doc{i:08d}", "c4", (TextChunk(t),), source_url=f"https://example.com/{i}")
        for i, t in enumerate(texts)
    ]
    print(
        f"\n## Tokenize + pack throughput: {count} C4-like texts, seq_len {seq_len},"
        f" best of {repeats}"
    )
    print(
        "| tokenizer | bare SentencePiece encode (tokens/s)"
        " | tokenize + pack, ours (tokens/s) | ratio |"
    )
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as directory:
        models = [(SAMPLE_TOKENIZER, "bundled sample model (1000 pieces)")]
        larger = larger_tokenizer(directory)
        if larger:
            models.append(larger)
        for path, label in models:
            tokenizer = Tokenizer(path, tokens_per_image=16)
            encode = tokenizer._processor.encode

            def bare() -> int:
                return sum(len(encode(t, out_type=int)) for t in texts)

            def ours() -> int:
                return sum(
                    int((s.segment_ids > 0).sum())
                    for s in pack.pack((tokenize_document(d, tokenizer) for d in docs), seq_len, 0)
                )

            rates = {}
            for name, run in (("bare", bare), ("ours", ours)):
                times = []
                for _ in range(repeats):
                    start = time.perf_counter()
                    tokens = run()
                    times.append(time.perf_counter() - start)
                if name == "ours":
                    tokens -= 2 * count  # BOS and EOS: count the same text tokens on both sides
                rates[name] = tokens / min(times)
            ratio = rates["ours"] / rates["bare"]
            print(f"| {label} | {rates['bare']:,.0f} | {rates['ours']:,.0f} | {ratio:.2f} |")


def memory_child(count: int) -> None:
    """Pack and write ``count`` streamed documents; print max RSS in MiB."""
    sink = io.BytesIO()

    class Discard(io.RawIOBase):
        def writable(self) -> bool:
            return True

        def write(self, data) -> int:  # type: ignore[override]
            return len(data)

    sequences = pack.pack(synthetic_docs(count), 2048, 0)
    samples = ((shards.sample_key("c4", 0, i), s) for i, s in enumerate(sequences))
    info = shards.write_shard(Discard(), samples)  # type: ignore[arg-type]
    del sink
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss over exec from the parent
    with open("/proc/self/status") as status:
        peak_kib = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    print(info["samples"], peak_kib / 1024)


def bench_memory(count: int) -> None:
    print("\n## Peak memory: pack + write a shard, documents streamed, seq_len 2048")
    print("| input | documents | sequences | peak RSS (MiB) |")
    print("|---|---|---|---|")
    rows = []
    for factor in (1, 10):
        out = subprocess.run(
            [sys.executable, __file__, "--memory-child", str(count * factor)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        rows.append(float(out[1]))
        print(f"| {factor}x | {count * factor} | {out[0]} | {float(out[1]):.1f} |")
    print(f"| ratio 10x / 1x | | | {rows[1] / rows[0]:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--memory-child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child is not None:
        memory_child(args.memory_child)
        return
    scale = 5 if args.quick else 1
    bench_efficiency(50_000 // scale)
    bench_mmc4_splits(20_000 // scale)
    bench_throughput(4_000 // scale)
    bench_memory(30_000)  # 1x already fills the packing buffer three times: steady state


if __name__ == "__main__":
    main()
