from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from corpora.dedup.text import (
    ngram_hashes,
    normalise_text,
    normalised_bytes,
    record_text,
    text_hash,
    text_hashes,
    words,
)
from corpora.record import Document, ImageChunk, TextChunk


def test_exact_key_ignores_case_punctuation_and_spacing_only():
    assert text_hash("A cat, on a MAT!") == text_hash("a cat on a mat")
    assert text_hash("a cat on a mat") != text_hash("a cat on the mat")
    assert normalise_text("Ｆｕｌｌ　width") == "full width"  # NFKC


def test_record_text_is_the_text_chunks_in_order():
    doc = Document(
        "d", "mmc4", (TextChunk("One."), ImageChunk("http://x/a.jpg"), TextChunk("Two."))
    )
    assert record_text(doc) == "One.\nTwo."


@given(st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=1, max_size=30), st.integers(1, 6))
def test_ngram_hashes_equal_exactly_when_the_ngrams_are_equal(tokens, n):
    grams = ngram_hashes(tokens, n).tolist()
    size = min(n, len(tokens))
    texts = [tuple(tokens[i : i + size]) for i in range(len(tokens) - size + 1)]
    assert len(grams) == len(texts)
    for i in range(len(texts)):
        for j in range(len(texts)):
            assert (grams[i] == grams[j]) == (texts[i] == texts[j])


def test_no_words_no_ngrams():
    assert words("  ...  ") == []
    assert len(ngram_hashes([], 5)) == 0


@given(st.text(max_size=60))
def test_words_are_the_normalised_text_split(text):
    normalised = normalise_text(text)
    assert words(text) == (normalised.split(" ") if normalised else [])


@given(st.text(alphabet=st.characters(max_codepoint=127)) | st.text())
def test_the_ascii_fast_path_normalises_as_the_unicode_one(text):
    # every build's dedup index hashes every text through the fast path
    assert normalised_bytes(text) == normalise_text(text).encode("utf-8")


_SPACES_AND_PUNCTUATION = st.text(alphabet=st.sampled_from(" \t\n\x01,.!aZ_9é"), max_size=12)


@given(st.lists(_SPACES_AND_PUNCTUATION | st.text(), max_size=8))
def test_a_batch_hashes_each_text_as_alone(texts):
    # the index hashes a batch's texts together: boundaries, runs of spaces and
    # texts of nothing but spaces must not leak from one text into the next
    assert text_hashes(texts) == [text_hash(text) for text in texts]
