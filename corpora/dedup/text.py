"""A record's text as text dedup and decontamination see it.

Two texts are exact duplicates when their normalised forms are equal:
Unicode NFKC, case folded, punctuation removed, runs of white space made one
space (datatrove's exact-dedup normalisation, less its number folding)::

    >>> normalise_text("  The Cat,  sat!\\n")
    'the cat sat'
    >>> text_hash("The cat sat.") == text_hash("the  CAT sat")
    True
    >>> text_hash("the cat sat")
    'e6e0a7cd0f71ba0a05316cbe1c0bd696'

The words of the normalised text are hashed once each (a stable 64-bit
hash); an n-gram's hash combines its words' hashes, so every n-gram of a
document is hashed in a few numpy operations:

    >>> grams = ngram_hashes(words("a b c a b c"), 3)  # abc, bca, cab, abc
    >>> len(grams), bool(grams[0] == grams[3]), bool(grams[0] == grams[1])
    (4, True, False)
    >>> len(ngram_hashes(words("a b"), 5))  # shorter than n: the whole text is one n-gram
    1
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from typing import Sequence

import numpy as np

from corpora.config.spec import Option
from corpora.record import Document

DUPLICATE_TEXT, NEAR_DUPLICATE_TEXT = "duplicate_text", "near_duplicate_text"
EXACT, NEAR = "exact", "near"
DEDUP_TEXT_MODES = ("off", EXACT, NEAR)
DEDUP_TEXT = Option(
    "dedup_text",
    str,
    "off",
    "remove duplicate texts before any download: exact (the same normalised text) or near "
    "(MinHash LSH over word 5-grams, 14 bands x 8 rows); the smallest record id is kept.",
    choices=DEDUP_TEXT_MODES,
)

_WORD = re.compile(r"\w+")
# An odd 64-bit multiplier: an n-gram's hash is sum(word_hash[i] * _BASE ** (n-1-i)) mod 2**64.
_BASE = np.uint64(0x9E3779B97F4A7C15)


def normalise_text(text: str) -> str:
    """NFKC, case folded, punctuation removed, white space collapsed: the
    word runs joined by one space (40 % less CPU than substituting
    punctuation, then spaces; the same text).

    >>> normalise_text("  A cat, on a MAT! ﬁne_day ")
    'a cat on a mat fine_day'
    """
    folded = (text if text.isascii() else unicodedata.normalize("NFKC", text)).casefold()
    return " ".join(_WORD.findall(folded))


# An ASCII text's word characters ([0-9A-Za-z_], as ``\w`` matches them there) lower
# cased, every other byte a space: its normalised form is the runs of the rest.
_ASCII_WORDS = (
    bytes(ord(c.lower()) if c.isalnum() or c == "_" else ord(" ") for c in map(chr, range(128)))
    + b" " * 128
)


def normalised_bytes(text: str) -> bytes:
    """:func:`normalise_text` as UTF-8 bytes; an ASCII text's (C4's, most
    captions') in a few C passes over its bytes, a tenth of the CPU.

    >>> normalised_bytes("  A cat, on a MAT! fine_day ")
    b'a cat on a mat fine_day'
    >>> normalised_bytes("Ünïcode, ﬁne") == normalise_text("Ünïcode, ﬁne").encode()
    True
    """
    if text.isascii():
        return b" ".join(text.encode("ascii").translate(_ASCII_WORDS).split())
    return normalise_text(text).encode("utf-8")


def text_hash(text: str) -> str:
    """The exact-duplicate key of ``text``: 128 bits of blake2b of its normalised form, in hex."""
    return hashlib.blake2b(normalised_bytes(text), digest_size=16).hexdigest()


def text_hashes(texts: Sequence[str]) -> list[str]:
    """:func:`text_hash` of each of ``texts``, the ASCII ones normalised
    together: their bytes joined, mapped by one ``translate`` and each run of
    spaces cut to one by a numpy mask over the whole batch (no word is cut
    out on its own: a C4 document's hash in about half the CPU).

    >>> texts = ["A cat, sat!", "  ", "Ünïcode ﬁne", "\\x01 one\\x01two ", ""]
    >>> text_hashes(texts) == [text_hash(t) for t in texts]
    True
    """
    hashes = [""] * len(texts)
    ascii_texts = []
    for i, text in enumerate(texts):
        if text.isascii():
            ascii_texts.append(i)
        else:
            hashes[i] = text_hash(text)
    if not ascii_texts:
        return hashes
    joined = "\n".join(texts[i] for i in ascii_texts).encode("ascii").translate(_ASCII_WORDS)
    codes = np.frombuffer(bytearray(joined), dtype=np.uint8)
    ends = np.cumsum([len(texts[i]) + 1 for i in ascii_texts]) - 1  # each text's "\n"
    codes[ends[:-1]] = 1  # a byte no text has after the translate: the texts' boundaries
    keep = codes != ord(" ")
    keep[1:] |= keep[:-1]  # a run of spaces keeps its first, after a word or a boundary
    squeezed = codes[keep].tobytes().split(b"\x01")
    for i, normalised in zip(ascii_texts, squeezed):
        hashes[i] = hashlib.blake2b(normalised.strip(b" "), digest_size=16).hexdigest()
    return hashes


def record_text(document: Document) -> str:
    """The text a record is judged by: its text chunks in reading order, one per line.

    For an MMC4 document (before its layout) that is the whole document; for a
    pair (COYO, WIT) its caption; for C4 the document.
    """
    return "\n".join(chunk.text for chunk in document.texts)


def words(text: str) -> list[str]:
    """The words of the normalised ``text`` (its runs of word characters, case folded).

    >>> words("It's a CAT-like cat.") == normalise_text("It's a CAT-like cat.").split(" ")
    True
    """
    folded = (text if text.isascii() else unicodedata.normalize("NFKC", text)).casefold()
    return _WORD.findall(folded)


def word_hashes(tokens: list[str]) -> np.ndarray:
    """A stable 64-bit hash of each word (uint64), the same in every process.

    Words are few and repeat (Zipf), so each process keeps the hashes it has
    computed (up to :data:`_CACHE_WORDS` words, then starts again).
    """
    cache = _WORD_HASHES
    if len(cache) > _CACHE_WORDS:
        cache.clear()
    get = cache.get
    values = [get(word) for word in tokens]
    if None in values:
        for i, value in enumerate(values):
            if value is None:
                word = tokens[i]
                digest = hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest()
                values[i] = cache[word] = int.from_bytes(digest, "little")
    return np.array(values, dtype=np.uint64)


_CACHE_WORDS = 1 << 20
_WORD_HASHES: dict[str, int] = {}


def ngram_hashes(tokens: list[str], n: int, hashes: np.ndarray | None = None) -> np.ndarray:
    """The 64-bit hash of every word ``n``-gram of ``tokens`` in order (uint64);
    a text of fewer than ``n`` words (but one at least) is one n-gram of all its words."""
    if not tokens:
        return np.zeros(0, dtype=np.uint64)
    if hashes is None:
        hashes = word_hashes(tokens)
    n = min(n, len(tokens))
    count = len(tokens) - n + 1
    combined = np.zeros(count, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for offset in range(n):
            combined = combined * _BASE + hashes[offset : offset + count]
        # one more mix, so n-grams of different n rarely share a hash
        combined = combined * _BASE + np.uint64(n)
    return combined
