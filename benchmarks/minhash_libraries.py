"""MinHash signatures: corpora.dedup.minhash (numpy) against datasketch, on the same texts.

    python3 -m benchmarks.minhash_libraries [--documents 2000] [--words 400]

datasketch is not a dependency of corpora; to run its side, put it on the path
(``pip install --target DIR datasketch`` and ``PYTHONPATH=DIR``); without it
only ours is measured. Both take 5-gram shingles of the same normalised words
and 112 permutations; the figure is CPU seconds (user+sys) per document.
"""

from __future__ import annotations

import argparse
import os
import random

from corpora.dedup.minhash import MinHashSettings, band_keys
from corpora.dedup.text import words


def _texts(documents: int, length: int) -> list[str]:
    rng = random.Random(0)
    vocab = [
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9)))
        for _ in range(30000)
    ]
    # Zipf-like: a few words are very common, as in English
    weights = [1 / (rank + 1) for rank in range(len(vocab))]
    return [" ".join(rng.choices(vocab, weights, k=length)) for _ in range(documents)]


def _cpu() -> float:
    times = os.times()
    return times.user + times.system


def ours(texts: list[str]) -> float:
    settings = MinHashSettings()
    start = _cpu()
    for text in texts:
        band_keys(text, settings)
    return _cpu() - start


def datasketch_side(texts: list[str]) -> float | None:
    try:
        from datasketch import MinHash, MinHashLSH
    except ImportError:
        return None
    lsh = MinHashLSH(num_perm=112, params=(14, 8))
    start = _cpu()
    for i, text in enumerate(texts):
        tokens = words(text)
        shingles = {" ".join(tokens[j : j + 5]).encode() for j in range(max(1, len(tokens) - 4))}
        m = MinHash(num_perm=112)
        m.update_batch(list(shingles))
        lsh.insert(str(i), m)  # band keys, as ours computes them
    return _cpu() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=2000)
    parser.add_argument("--words", type=int, default=400)
    args = parser.parse_args()
    texts = _texts(args.documents, args.words)
    print(f"{args.documents} documents of {args.words} words, 5-grams, 14 bands x 8 rows")
    mine = ours(texts)
    print(f"corpora.dedup.minhash (numpy): {mine / len(texts) * 1e6:7.0f} µs CPU per document")
    theirs = datasketch_side(texts)
    if theirs is None:
        print("datasketch: not installed (see the module's docstring)")
    else:
        print(
            f"datasketch 2.0.0:               {theirs / len(texts) * 1e6:7.0f} µs CPU per document"
        )
    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
