"""MinHash signatures over word n-grams and their LSH band keys (``near_duplicate_text``).

datatrove's defaults: word 5-grams, 14 bands of 8 rows (112 hashes). Two
texts of Jaccard similarity ``s`` (over their sets of 5-grams) share at least
one band with probability ``1 - (1 - s**8)**14``: 0.2 % at s = 0.3, 50 % at
s = 0.72, 98 % at s = 0.85, 99.99 % at s = 0.9. Sharing a band makes two texts
one cluster; the pipeline joins clusters that share a member (connected
components) and keeps the member with the smallest record id.

Each of the 112 hashes is Dietzfelbinger's multiply-shift of the n-gram's
64-bit hash, ``(a * x + b) mod 2**64 >> 32`` with ``a`` odd; ``a`` and ``b``
derive from the seed through blake2b, so a signature is the same in every
process, numpy version and run::

    >>> near = MinHashSettings()
    >>> one = " ".join(f"word{i}" for i in range(100))
    >>> two = one.replace("word50", "changed")  # 5 of 96 five-grams differ
    >>> three = " ".join(f"other{i}" for i in range(100))
    >>> shared = lambda x, y: len(set(band_keys(x, near)) & set(band_keys(y, near)))
    >>> shared(one, one), shared(one, two) > 0, shared(one, three)
    (14, True, 0)
    >>> band_keys("", near)  # no words, no signature: never a near duplicate
    []
    >>> round(estimated_jaccard(signature(one, near), signature(two, near)), 2)
    0.92

numpy, not ``datasketch``: datasketch's ``MinHash`` hashes each n-gram with
SHA-1 in Python and builds an object per document; here each word is hashed
once and every n-gram, permutation and band in a few array operations
(docs/dedup.md gives the measured cost of both).
"""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np

from corpora.dedup.text import ngram_hashes, words

_CHUNK = 4096  # n-grams hashed at a time: a 100,000-word page stays a few MB


@dataclasses.dataclass(frozen=True)
class MinHashSettings:
    """What shapes ``near_duplicate_text``: n-gram size, bands × rows, seed."""

    ngram: int = 5
    bands: int = 14
    rows: int = 8
    seed: int = 1

    def __post_init__(self) -> None:
        if self.ngram < 1 or self.bands < 1 or self.rows < 1:
            raise ValueError("ngram, bands and rows must be at least 1")

    @property
    def hashes(self) -> int:
        return self.bands * self.rows

    @property
    def threshold(self) -> float:
        """The similarity at which two texts share a band half the time: ``(1/b)**(1/r)``.

        >>> round(MinHashSettings().threshold, 3)
        0.719
        """
        return (1 / self.bands) ** (1 / self.rows)


def _parameters(settings: MinHashSettings) -> tuple[np.ndarray, np.ndarray]:
    cached = _PARAMETERS.get(settings)
    if cached is None:
        values = [
            int.from_bytes(
                hashlib.blake2b(f"{settings.seed}:{i}".encode(), digest_size=16).digest(), "little"
            )
            for i in range(settings.hashes)
        ]
        a = np.array([(v & (2**64 - 1)) | 1 for v in values], dtype=np.uint64)
        b = np.array([v >> 64 for v in values], dtype=np.uint64)
        cached = _PARAMETERS[settings] = (a, b)
    return cached


_PARAMETERS: dict[MinHashSettings, tuple[np.ndarray, np.ndarray]] = {}


def signature(text: str, settings: MinHashSettings) -> np.ndarray | None:
    """The MinHash signature of ``text`` (uint32, ``settings.hashes`` long); ``None``: no words."""
    grams = ngram_hashes(words(text), settings.ngram)
    if not len(grams):
        return None
    grams = np.unique(grams)
    a, b = _parameters(settings)
    smallest = np.full(settings.hashes, np.iinfo(np.uint64).max, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for start in range(0, len(grams), _CHUNK):
            hashed = grams[start : start + _CHUNK, None] * a
            hashed += b
            np.minimum(smallest, hashed.min(axis=0), out=smallest)
    # the shift is monotone: the smallest of the shifted values is the smallest shifted
    return (smallest >> np.uint64(32)).astype(np.uint32)


def signature_band_keys(values: np.ndarray, settings: MinHashSettings) -> list[bytes]:
    """One key per band: the band's number and 8 bytes of blake2b of its rows."""
    rows = values.reshape(settings.bands, settings.rows)
    return [
        bytes([band]) + hashlib.blake2b(rows[band].tobytes(), digest_size=8).digest()
        for band in range(settings.bands)
    ]


def band_keys(text: str, settings: MinHashSettings) -> list[bytes]:
    """The LSH band keys of ``text``; two texts that share one are candidates."""
    values = signature(text, settings)
    return [] if values is None else signature_band_keys(values, settings)


def batch_band_keys(texts: list[str], settings: MinHashSettings) -> list[list[bytes]]:
    """:func:`band_keys` of each text, the same keys, for a batch at a time:
    a batch's words hashed in one call, and the n-grams, permutations and
    minima of texts that together hold up to :data:`_CHUNK` n-grams in a few
    array operations (a caption's signature by itself is a dozen numpy calls
    on arrays of five; a longer text goes alone, as :func:`band_keys`).

    >>> near = MinHashSettings()
    >>> texts = ["a cat sat on the mat today", "", "two words", "a cat sat on the mat"]
    >>> batch_band_keys(texts, near) == [band_keys(text, near) for text in texts]
    True
    """
    tokens = [words(text) for text in texts]
    found: list[list[bytes]] = [[] for _ in texts]
    group: list[int] = []  # texts of at least ngram words whose n-grams go together
    grams = 0
    for index, text_words in enumerate(tokens):
        count = len(text_words) - settings.ngram + 1
        if not text_words:
            continue
        if count < 1 or count > _CHUNK:  # one n-gram of all its words, or a long text
            found[index] = band_keys(texts[index], settings)
            continue
        if grams + count > _CHUNK:
            _group_keys(group, tokens, settings, found)
            group, grams = [], 0
        group.append(index)
        grams += count
    _group_keys(group, tokens, settings, found)
    return found


def _group_keys(
    group: list[int], tokens: list[list[str]], settings: MinHashSettings, found: list
) -> None:
    """The band keys of the texts ``group`` (indices into ``tokens``, each of
    at least ``settings.ngram`` words) into ``found``: their n-gram hashes as
    :func:`~corpora.dedup.text.ngram_hashes` makes them, over the words of all
    of them at once (those that straddle two texts left out), and each text's
    minima by one ``reduceat``."""
    if not group:
        return
    n = settings.ngram
    combined = ngram_hashes([word for index in group for word in tokens[index]], n)
    lengths = np.array([len(tokens[index]) for index in group])
    ends = np.cumsum(lengths)
    starts = ends - lengths
    # the n-grams that lie inside one text: those starting up to n - 1 before its end
    inside = np.concatenate([np.arange(a, b - n + 1) for a, b in zip(starts, ends)])
    grams = combined[inside]
    firsts = np.concatenate([[0], np.cumsum(lengths - n + 1)[:-1]])
    a, b = _parameters(settings)
    with np.errstate(over="ignore"):
        hashed = grams[:, None] * a
        hashed += b
    smallest = np.minimum.reduceat(hashed, firsts, axis=0)
    values = (smallest >> np.uint64(32)).astype(np.uint32)
    # signature_band_keys of each row, its bands' bytes cut from one buffer
    data, width = memoryview(values.tobytes()), settings.rows * values.itemsize
    prefixes = [bytes([band]) for band in range(settings.bands)]
    blake2b, start = hashlib.blake2b, 0
    for index in group:
        keys = []
        for prefix in prefixes:
            keys.append(prefix + blake2b(data[start : start + width], digest_size=8).digest())
            start += width
        found[index] = keys


def estimated_jaccard(one: np.ndarray, two: np.ndarray) -> float:
    """The share of equal hashes: an estimate of the two texts' n-gram Jaccard similarity."""
    return float(np.mean(one == two))
