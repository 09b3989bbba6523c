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


def estimated_jaccard(one: np.ndarray, two: np.ndarray) -> float:
    """The share of equal hashes: an estimate of the two texts' n-gram Jaccard similarity."""
    return float(np.mean(one == two))
