from __future__ import annotations

import itertools

import numpy as np

from corpora.dedup.minhash import MinHashSettings, band_keys, estimated_jaccard, signature
from corpora.dedup.text import record_text
from tests.planted_texts import planted


def test_signature_is_stable_across_calls_and_settings_objects():
    text = "the same words in the same order give the same signature every time"
    one, two = signature(text, MinHashSettings()), signature(text, MinHashSettings(seed=1))
    assert one.dtype == np.uint32 and len(one) == 112
    assert np.array_equal(one, two)
    assert not np.array_equal(one, signature(text, MinHashSettings(seed=2)))


def test_planted_near_copies_share_a_band_and_unrelated_texts_never_do():
    corpus = planted(unrelated=300, exact=0, near=100)
    settings = MinHashSettings()
    texts = {doc.id: record_text(doc) for doc in corpus.documents}
    keys = {rid: set(band_keys(text, settings)) for rid, text in texts.items()}
    found = sum(bool(keys[copy] & keys[source]) for copy, source in corpus.near.items())
    assert found >= 0.95 * len(corpus.near)
    merged = [(a, b) for a, b in itertools.combinations(corpus.originals, 2) if keys[a] & keys[b]]
    assert merged == []


def test_estimated_jaccard_is_near_the_true_one():
    base = [f"w{i}" for i in range(200)]
    edited = base[:100] + ["x"] + base[101:]
    grams = lambda ws: {tuple(ws[i : i + 5]) for i in range(len(ws) - 4)}  # noqa: E731
    true = len(grams(base) & grams(edited)) / len(grams(base) | grams(edited))
    settings = MinHashSettings()
    estimate = estimated_jaccard(
        signature(" ".join(base), settings), signature(" ".join(edited), settings)
    )
    assert abs(estimate - true) < 0.1


def test_batch_band_keys_are_band_keys_text_by_text():
    """Captions, texts shorter than the n-gram, empty ones, unicode, and texts
    whose n-grams fill a chunk or more (batched together, cut, or alone)."""
    from corpora.dedup.minhash import batch_band_keys

    rng = np.random.default_rng(7)
    vocabulary = [f"w{i}" for i in range(300)] + ["Ünïcode", "ﬁne", "día"]
    texts = [f"a photograph, number {i}, taken on a bright day" for i in range(40)]
    texts += ["", "   ", "two words", "one", "ﬁne Ünïcode día café résumé"]
    for size in (4, 5, 6, 50, 4086, 4100, 4116):  # about a chunk of 4,096 n-grams
        texts.append(" ".join(rng.choice(vocabulary, size)))
    order = rng.permutation(len(texts))
    for shuffled in (texts, [texts[i] for i in order]):
        for settings in (MinHashSettings(), MinHashSettings(ngram=3, bands=4, rows=2, seed=3)):
            expected = [band_keys(text, settings) for text in shuffled]
            assert batch_band_keys(shuffled, settings) == expected
