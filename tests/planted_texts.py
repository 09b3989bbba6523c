"""Texts with planted duplicates for the text dedup tests: unrelated documents
of random words, exact copies (other case and punctuation, other ids) and near
copies (a few words replaced), every id and word from a seed."""

from __future__ import annotations

import dataclasses
import random

from corpora.record import Document, TextChunk


def vocabulary(seed: int = 0, size: int = 3000) -> list[str]:
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    return sorted(
        {"".join(rng.choice(letters) for _ in range(rng.randint(3, 9))) for _ in range(size)}
    )


@dataclasses.dataclass(frozen=True)
class Planted:
    documents: list[Document]  # shuffled
    originals: list[str]  # ids of the unrelated documents (each smaller than its copies' ids)
    exact: dict[str, str]  # exact copy id -> original id
    near: dict[str, str]  # near copy id -> original id


def planted(
    unrelated: int = 200,
    exact: int = 20,
    near: int = 40,
    words: int = 200,
    edits: int = 3,
    corpus: str = "c4",
    seed: int = 1,
) -> Planted:
    """``unrelated`` documents of ``words`` random words (ids ``doc-0000``…); ``exact``
    copies of the first ones with other case and punctuation (ids ``z-exact-…``, larger,
    so the original is kept); ``near`` copies of the next ones with ``edits`` words
    replaced (ids ``z-near-…``)."""
    rng = random.Random(seed)
    vocab = vocabulary(seed)
    texts = {f"doc-{i:04d}": " ".join(rng.choices(vocab, k=words)) for i in range(unrelated)}
    originals = sorted(texts)
    exact_ids, near_ids = {}, {}
    for i in range(exact):
        source = originals[i]
        copy = texts[source].upper().replace(" ", ", ", 3) + "."
        exact_ids[f"z-exact-{i:04d}"] = source
        texts[f"z-exact-{i:04d}"] = copy
    for i in range(near):
        source = originals[exact + i]
        tokens = texts[source].split(" ")
        for position in rng.sample(range(len(tokens)), edits):
            tokens[position] = rng.choice(vocab)
        near_ids[f"z-near-{i:04d}"] = source
        texts[f"z-near-{i:04d}"] = " ".join(tokens)
    documents = [Document(rid, corpus, (TextChunk(text),)) for rid, text in texts.items()]
    rng.shuffle(documents)
    return Planted(documents, originals, exact_ids, near_ids)
