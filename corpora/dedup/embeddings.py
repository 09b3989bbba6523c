"""Near-duplicate images by their CLIP image embeddings (``--near-dup-clip-sim``).

When a build scores with CLIP and ``--near-dup-clip-sim T`` is given, two
images whose CLIP image embeddings have cosine similarity at least ``T`` are
near duplicates (``near_duplicate_image``, the pHash rule's reason): they are
joined into clusters and the member with the smallest key (record id, image
position) is kept, as :mod:`corpora.dedup.images` does for perceptual hashes.
The Beam step is :mod:`pipelines.dedup_embeddings`.

No step holds every embedding: each is filed under :data:`BANDS` buckets by
random-hyperplane LSH (SimHash): :data:`ROWS` sign bits per band, against
hyperplanes drawn from a fixed seed through blake2b (the same on every runner,
worker count and numpy version, :func:`hyperplanes`). Only embeddings sharing
a bucket are compared, exactly (:func:`near_pairs`), and a pair is reported
from the first band it shares only, so it is found once. Two embeddings at
angle θ agree on one sign bit with probability 1 − θ/π, so share a band with
probability 1 − (1 − (1 − θ/π)^ROWS)^BANDS (:func:`found_probability`): unlike
the pHash banding, this may miss a pair, rarely at the thresholds that matter.

The embedding of an image is held in the image's meta
(:data:`corpora.clip.settings.IMAGE_EMBEDDING`) from the CLIP stage to this
one, which takes it out (:func:`without_embeddings`): it is never written into a
shard, and a build without the flag never keeps it. The CLIP stage puts it
there (:func:`with_embeddings`: a unit vector,
rounded to 4 decimals, so that a last-bit difference between two batchings
of the model changes no decision).

Worked example: three images, two of the same picture.

>>> import numpy as np
>>> cat = np.array([1.0, 0.2, 0.0, 0.0])
>>> members = [(("a", 0), unit(cat)), (("b", 0), unit(cat + [0.0, 0.05, 0.0, 0.0])),
...            (("c", 0), unit(np.array([0.0, 0.0, 1.0, 0.3])))]
>>> pairs = sorted({p for band, bucket in buckets(members).items()
...                 for p in near_pairs(bucket, 0.95, band[0])})
>>> pairs
[(('a', 0), ('b', 0))]
>>> round(found_probability(0.95), 4), round(found_probability(0.5), 4)
(0.9998, 0.2952)
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
from typing import Any, Hashable, Iterable, Mapping, Sequence

import numpy as np

from corpora.config.spec import Option
from corpora.record import Document, ImageChunk

# An image chunk's meta key: its CLIP image embedding, put there by the CLIP
# stage (corpora.clip.scoring, pipelines/clip.py) only with --near-dup-clip-sim,
# taken out by this rule's step: never in a shard.
IMAGE_EMBEDDING = "clip_image_embedding"
DECIMALS = 4  # kept rounded: a last-bit difference between two batchings changes nothing

BANDS = 20  # buckets per embedding
ROWS = 10  # sign bits (hyperplanes) per band: a bucket holds about 1 / 2**ROWS of unrelated images
SEED = b"corpora-clip-simhash-v1"

NEAR_DUP_CLIP_SIM = "near_dup_clip_sim"


def unit(vector) -> np.ndarray:
    """``vector`` scaled to length 1, float32, rounded to :data:`DECIMALS`.

    >>> unit([3.0, 4.0])
    array([0.6, 0.8], dtype=float32)
    """
    vector = np.asarray(vector, dtype=np.float64)
    norm = float(np.linalg.norm(vector))
    if norm == 0.0:
        return np.zeros(vector.shape, dtype=np.float32)
    return np.round(vector / norm, DECIMALS).astype(np.float32)


@functools.lru_cache(maxsize=8)
def hyperplanes(dim: int, bands: int = BANDS, rows: int = ROWS) -> np.ndarray:
    """``[bands * rows, dim]`` standard normal hyperplanes from :data:`SEED`
    (Box-Muller over blake2b's bytes, so no random generator's version matters).

    >>> planes = hyperplanes(4, 2, 3)
    >>> planes.shape, bool(np.array_equal(planes, hyperplanes(4, 2, 3)))
    ((6, 4), True)
    """
    count = bands * rows * dim
    pairs = -(-count // 2)
    raw = bytearray()
    block = 0
    while len(raw) < pairs * 16:
        raw += hashlib.blake2b(SEED + block.to_bytes(8, "little"), digest_size=64).digest()
        block += 1
    words = np.frombuffer(bytes(raw[: pairs * 16]), dtype="<u8").reshape(pairs, 2)
    u1 = ((words[:, 0] >> np.uint64(11)).astype(np.float64) + 1.0) / 2.0**53  # (0, 1]
    u2 = (words[:, 1] >> np.uint64(11)).astype(np.float64) / 2.0**53
    radius = np.sqrt(-2.0 * np.log(u1))
    normal = np.concatenate([radius * np.cos(2 * np.pi * u2), radius * np.sin(2 * np.pi * u2)])
    return normal[:count].reshape(bands * rows, dim)


def band_keys(embedding: np.ndarray, bands: int = BANDS, rows: int = ROWS) -> list[tuple[int, int]]:
    """The buckets of an embedding: (band, the band's ``rows`` sign bits as an int).

    >>> len(band_keys(unit([1.0, 0.0, 0.0]))), band_keys(unit([1.0, 0.0, 0.0]), 2, 3)
    (20, [(0, 2), (1, 4)])
    """
    signs = (hyperplanes(int(embedding.shape[0]), bands, rows) @ embedding) >= 0
    weights = 1 << np.arange(rows)
    values = signs.reshape(bands, rows).astype(np.int64) @ weights
    return [(band, int(value)) for band, value in enumerate(values)]


def first_shared_band(a: np.ndarray, b: np.ndarray, bands: int = BANDS, rows: int = ROWS):
    """The first band whose bucket ``a`` and ``b`` share, or None."""
    return _first_shared(band_keys(a, bands, rows), band_keys(b, bands, rows))


def _first_shared(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> int | None:
    for (band, x), (_, y) in zip(a, b):
        if x == y:
            return band
    return None


def buckets(
    members: Iterable[tuple[Hashable, np.ndarray]], bands: int = BANDS, rows: int = ROWS
) -> dict[tuple[int, int], list]:
    """``members`` (key, unit embedding) filed under their band keys."""
    found: dict = {}
    for key, embedding in members:
        for band in band_keys(embedding, bands, rows):
            found.setdefault(band, []).append((key, embedding))
    return found


def near_pairs(
    members: Sequence[tuple[Hashable, np.ndarray]],
    threshold: float,
    band: int | None = None,
    bands: int = BANDS,
    rows: int = ROWS,
) -> list[tuple]:
    """Pairs ``(key_a, key_b)``, ``key_a < key_b``, of one bucket's ``members``
    whose cosine is at least ``threshold``; with ``band``, only the pairs for
    which it is the first band they share (each pair reported from one bucket).
    A bucket of n members costs one n × n matrix product.

    >>> e = unit([1.0, 0.0])
    >>> near_pairs([("y", e), ("x", e), ("z", unit([0.0, 1.0]))], 0.95)
    [('x', 'y')]
    """
    if len(members) < 2:
        return []
    members = sorted(members, key=lambda member: member[0])
    matrix = np.stack([embedding for _, embedding in members]).astype(np.float32)
    cosines = matrix @ matrix.T
    keys: dict[int, list] = {}  # a member's band keys, made once however many pairs it is in

    def keys_of(index: int) -> list:
        if index not in keys:
            keys[index] = band_keys(members[index][1], bands, rows)
        return keys[index]

    pairs = []
    for i, j in zip(*np.nonzero(np.triu(cosines >= np.float32(threshold), k=1))):
        i, j = int(i), int(j)
        if band is None or _first_shared(keys_of(i), keys_of(j)) == band:
            pairs.append((members[i][0], members[j][0]))
    return pairs


def found_probability(cosine: float, bands: int = BANDS, rows: int = ROWS) -> float:
    """The probability that two embeddings of this cosine share a bucket."""
    agree = 1.0 - math.acos(max(-1.0, min(1.0, cosine))) / math.pi
    return 1.0 - (1.0 - agree**rows) ** bands


def image_embeddings(doc: Document) -> list[tuple[tuple[str, int], np.ndarray]]:
    """``((record id, position), embedding)`` of each image of ``doc`` the CLIP
    stage embedded.

    >>> from corpora.record import TextChunk
    >>> doc = Document("d", "coyo", (ImageChunk("u", meta={IMAGE_EMBEDDING: unit([1.0, 1.0])}),
    ...                              TextChunk("t")))
    >>> image_embeddings(doc)
    [(('d', 0), array([0.7071, 0.7071], dtype=float32))]
    """
    return [
        ((doc.id, position), np.asarray(image.meta[IMAGE_EMBEDDING], dtype=np.float32))
        for position, image in enumerate(doc.images)
        if IMAGE_EMBEDDING in image.meta
    ]


def with_embeddings(doc: Document, embeddings: Mapping[int, Any]) -> Document:
    """``doc`` with the embedding of its image ``position`` (a key of
    ``embeddings``) in that image's meta, as a unit vector (:func:`unit`)."""
    if not embeddings:
        return doc
    chunks, position = [], -1
    for chunk in doc.chunks:
        if isinstance(chunk, ImageChunk):
            position += 1
            if position in embeddings:
                chunk = dataclasses.replace(
                    chunk, meta={**chunk.meta, IMAGE_EMBEDDING: unit(embeddings[position])}
                )
        chunks.append(chunk)
    return doc.replace(chunks=tuple(chunks))


def without_embeddings(doc: Document) -> Document:
    """``doc`` with no image embedding left in its images' meta.

    >>> doc = with_embeddings(Document("d", "coyo", (ImageChunk("u"),)), {0: [0.0, 2.0]})
    >>> doc.images[0].meta
    {'clip_image_embedding': array([0., 1.], dtype=float32)}
    >>> without_embeddings(doc).images[0].meta
    {}
    """
    if not any(IMAGE_EMBEDDING in image.meta for image in doc.images):
        return doc
    chunks = tuple(
        dataclasses.replace(
            chunk, meta={k: v for k, v in chunk.meta.items() if k != IMAGE_EMBEDDING}
        )
        if isinstance(chunk, ImageChunk)
        else chunk
        for chunk in doc.chunks
    )
    return doc.replace(chunks=chunks)


def clip_sim(settings) -> float | None:
    """The build's ``--near-dup-clip-sim`` (None: off)."""
    return settings.stage_options.get(NEAR_DUP_CLIP_SIM)


def check_threshold(value) -> str | None:
    """A complaint about a threshold, or None.

    >>> check_threshold(1.5)
    '--near-dup-clip-sim is a cosine similarity in (0, 1], got 1.5'
    """
    if value is None or 0.0 < value <= 1.0:
        return None
    return f"--near-dup-clip-sim is a cosine similarity in (0, 1], got {value}"


def check_clip(settings) -> None:
    """Refuse ``--near-dup-clip-sim`` in a build that does not score with CLIP."""
    if clip_sim(settings) is not None and settings.clip is None:
        raise ValueError(
            "--near-dup-clip-sim needs --clip-model (it compares the CLIP stage's image "
            "embeddings; use --dedup-images near for perceptual near duplicates without CLIP)"
        )


NEAR_DUP_CLIP_SIM_OPTION = Option(
    NEAR_DUP_CLIP_SIM,
    float,
    None,
    "with --clip-model: images whose CLIP image embeddings have at least this cosine "
    "similarity (e.g. 0.95) are near duplicates; one of each cluster is kept (docs/dedup.md). "
    "Off unless given.",
    check=check_threshold,
)
