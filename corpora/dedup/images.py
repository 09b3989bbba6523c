"""Duplicate, near-duplicate, over-repeated and evaluation images: the rules,
as pure functions over records (the Beam steps are :mod:`pipelines.dedup_images`).

An image in a build is an *occurrence*: a record id and the image's position
among that record's images. The rules decide which occurrences leave:

- ``duplicate_image``: the same URL (before the fetch, so a duplicate is never
  downloaded) or the same bytes (after it: the sha256 of the body the server
  sent, :data:`SOURCE_SHA256`, which the store also records; a PNG of a JPEG's
  pixels resizes to the same bytes but is a near duplicate, not a copy). The
  occurrence with the smallest key (record id, position) is kept: a stable id
  decides, never the order records arrive.
- ``image_repeated`` (``--max-image-repeats N``): an image in more than N
  documents (logos, icons, banners, as OBELICS removes them) leaves from all.
- ``near_duplicate_image`` (``--dedup-images near``): perceptual hashes within
  the radius (:mod:`corpora.dedup.phash`, :mod:`corpora.dedup.lsh`) joined
  into clusters; the smallest key of each cluster is kept.
- ``eval_contamination`` (``--decontaminate PATH``): an image within the
  radius of an evaluation image leaves (:mod:`corpora.dedup.evaluation`).

What leaving means depends on the corpus (:func:`apply_removals`): a pairs
corpus (``spec.drop_on_image_failure``) drops the record with the reason; an
interleaved document loses the image, counted in ``meta["images_removed"]``,
and a document left without images follows its layout's rule
(``no_images_after_fetch``).

Worked example: three COYO-like records, ``b`` and ``c`` with the same URL.

>>> from corpora.record import Document, ImageChunk, TextChunk
>>> def pair(id, url):
...     return Document(id, "coyo", (ImageChunk(url), TextChunk("a cat")))
>>> docs = [pair("c", "http://x/1.jpg"), pair("a", "http://x/2.jpg"), pair("b", "http://x/1.jpg")]
>>> found = [item for doc in docs for item in occurrences(doc, url_key)]
>>> found[0]
('http://x/1.jpg', Occurrence(record_id='c', position=0, documents=1))
>>> decide_exact([o for k, o in found if k == "http://x/1.jpg"], dedup=True, max_repeats=None)
[('c', 0, 'duplicate_image')]
>>> apply_removals(docs[0], [(0, DUPLICATE_IMAGE)], drop_document=True)
Drop(reason='duplicate_image', record_id='c', detail='', count=1, url='http://x/1.jpg')
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections import Counter
from typing import Any, Callable, Iterable, Mapping

from corpora.config.spec import Option, zero_is_off
from corpora.dedup.phash import DEFAULT_DISTANCE
from corpora.dedup.sources import is_image_source
from corpora.record import Document, Drop, ImageChunk

DUPLICATE_IMAGE = "duplicate_image"
NEAR_DUPLICATE_IMAGE = "near_duplicate_image"
IMAGE_REPEATED = "image_repeated"
EVAL_CONTAMINATION = "eval_contamination"
REASONS = (DUPLICATE_IMAGE, NEAR_DUPLICATE_IMAGE, IMAGE_REPEATED, EVAL_CONTAMINATION)

DEDUP_MODES = ("off", "exact", "near")
DEFAULT_MODE = "exact"  # changes no build without duplicates

# An image chunk's meta keys, set by the fetch stage (corpora.fetch.attach) and
# by the URL step; never written into a shard (a shard's json holds a chunk's
# url, sha256, size and scores only).
SOURCE_SHA256 = "source_sha256"  # sha256 of the body the server sent
PHASH = "phash"  # the perceptual hash of the decoded pixels (an int), with near or decontaminate
URL_DOCUMENTS = "url_documents"  # documents the kept copy of a URL stood for


@dataclasses.dataclass(frozen=True, order=True)
class Occurrence:
    """One image in one record: ``documents`` is how many documents it stands
    for (the URL step keeps one copy of a URL and counts the others in it)."""

    record_id: str
    position: int
    documents: int = 1


def url_key(image: ImageChunk) -> str | None:
    return image.url


def bytes_key(image: ImageChunk) -> str | None:
    """The sha256 of the body the server sent (that of the image written for a
    record fetched before this rule)."""
    return image.meta.get(SOURCE_SHA256) or image.sha256


def occurrences(
    doc: Document, key_of: Callable[[ImageChunk], str | None]
) -> list[tuple[str, Occurrence]]:
    """``(key, occurrence)`` for each image of ``doc`` that has a key."""
    found = []
    for position, image in enumerate(doc.images):
        key = key_of(image)
        if key is not None:
            documents = int(image.meta.get(URL_DOCUMENTS, 1))
            found.append((key, Occurrence(doc.id, position, documents)))
    return found


def documents_of(group: Iterable[Occurrence]) -> int:
    """How many documents a key's occurrences stand for (a record counts once).

    >>> documents_of([Occurrence("a", 0, 3), Occurrence("a", 2), Occurrence("b", 0)])
    4
    """
    per_record: dict[str, int] = {}
    for occurrence in group:
        per_record[occurrence.record_id] = max(
            per_record.get(occurrence.record_id, 0), occurrence.documents
        )
    return sum(per_record.values())


def decide_exact(
    group: Iterable[Occurrence], dedup: bool, max_repeats: int | None
) -> list[tuple[str, int, str]]:
    """The occurrences of one key (URL or bytes) that leave, as ``(record id,
    position, reason)``: all of them if the key stands for more than
    ``max_repeats`` documents, else every one but the smallest (``dedup``).

    >>> group = [Occurrence("b", 1), Occurrence("a", 3), Occurrence("b", 0)]
    >>> decide_exact(group, dedup=True, max_repeats=None)
    [('b', 0, 'duplicate_image'), ('b', 1, 'duplicate_image')]
    >>> decide_exact(group, dedup=False, max_repeats=1)  # a and b: two documents
    [('a', 3, 'image_repeated'), ('b', 0, 'image_repeated'), ('b', 1, 'image_repeated')]
    """
    ordered = sorted(group)
    if max_repeats is not None and documents_of(ordered) > max_repeats:
        return [(o.record_id, o.position, IMAGE_REPEATED) for o in ordered]
    if not dedup:
        return []
    return [(o.record_id, o.position, DUPLICATE_IMAGE) for o in ordered[1:]]


def kept_documents(group: Iterable[Occurrence]) -> tuple[str, int, int] | None:
    """The kept occurrence of a URL and the documents it stands for, when more
    than one (what the bytes step adds up, so a logo under many URLs is counted
    whole).

    >>> kept_documents([Occurrence("b", 0), Occurrence("a", 1)])
    ('a', 1, 2)
    """
    ordered = sorted(group)
    documents = documents_of(ordered)
    return (ordered[0].record_id, ordered[0].position, documents) if documents > 1 else None


def apply_removals(
    doc: Document, entries: Iterable[tuple[int, str | int]], drop_document: bool
) -> Document | Drop:
    """``doc`` after the rules: ``entries`` are ``(position, reason)`` for an
    image that leaves, or ``(position, documents)`` for a kept URL that stood
    for several documents (noted in the chunk's meta).

    >>> from corpora.record import TextChunk
    >>> doc = Document("d", "mmc4", (ImageChunk("u0"), TextChunk("t"), ImageChunk("u1")))
    >>> kept = apply_removals(doc, [(0, DUPLICATE_IMAGE), (1, 4)], drop_document=False)
    >>> [c.url if c.kind == "image" else c.text for c in kept.chunks], kept.meta
    (['t', 'u1'], {'images_removed': {'duplicate_image': 1}})
    >>> kept.images[0].meta
    {'url_documents': 4}
    """
    reasons: dict[int, str] = {}
    documents: dict[int, int] = {}
    for position, what in entries:
        if isinstance(what, str):  # several rules may name one image: the first reason by name
            reasons[position] = min(what, reasons.get(position, what))
        else:
            documents[position] = what
    if not reasons and not documents:
        return doc
    images = doc.images
    if drop_document and reasons:
        position = min(reasons)
        return Drop(reasons[position], doc.id, url=images[position].url)
    chunks, position, removed = [], -1, Counter()
    for chunk in doc.chunks:
        if isinstance(chunk, ImageChunk):
            position += 1
            if position in reasons:
                removed[reasons[position]] += 1
                continue
            if position in documents:
                chunk = dataclasses.replace(
                    chunk, meta={**chunk.meta, URL_DOCUMENTS: documents[position]}
                )
        chunks.append(chunk)
    changed = doc.replace(chunks=tuple(chunks))
    if not removed:
        return changed
    total = Counter(doc.meta.get("images_removed") or {})
    total.update(removed)
    return changed.with_meta(images_removed=dict(sorted(total.items())))


def near_removals(
    labels: Iterable[tuple[tuple[str, int], tuple[str, int]]],
) -> list[tuple[str, int, str]]:
    """From each near occurrence's cluster label (its smallest member), those
    that leave: every one that is not its own label.

    >>> near_removals([(("a", 0), ("a", 0)), (("b", 2), ("a", 0))])
    [('b', 2, 'near_duplicate_image')]
    """
    return sorted(
        (node[0], node[1], NEAR_DUPLICATE_IMAGE) for node, label in labels if node != label
    )


@dataclasses.dataclass(frozen=True)
class ImageDedupSettings:
    """What the image rules do in one build (the stage options' values).

    >>> ImageDedupSettings.from_options({"dedup_images": "near", "max_image_repeats": 10})
    ImageDedupSettings(mode='near', distance=12, max_repeats=10, decontaminate=())
    """

    mode: str = DEFAULT_MODE
    distance: int = DEFAULT_DISTANCE
    max_repeats: int | None = None
    decontaminate: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.mode not in DEDUP_MODES:
            raise ValueError(
                f"unknown --dedup-images {self.mode!r}; one of {', '.join(DEDUP_MODES)}"
            )
        if not 0 <= self.distance <= 31:
            raise ValueError(f"--near-dup-distance must be in 0..31, got {self.distance}")
        if self.max_repeats is not None and self.max_repeats < 1:
            raise ValueError(f"--max-image-repeats must be at least 1, got {self.max_repeats}")

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> "ImageDedupSettings":
        distance = options.get("near_dup_distance")
        return cls(
            mode=options.get("dedup_images") or DEFAULT_MODE,
            distance=DEFAULT_DISTANCE if distance is None else int(distance),
            max_repeats=options.get("max_image_repeats") or None,
            # the image sources among --decontaminate's paths (the text rules read the rest)
            decontaminate=tuple(
                path for path in options.get("decontaminate") or () if is_image_source(path)
            ),
        )

    @property
    def exact(self) -> bool:
        return self.mode in ("exact", "near")

    @property
    def near(self) -> bool:
        return self.mode == "near"

    @property
    def hashes(self) -> bool:
        """Whether the fetch stage computes perceptual hashes."""
        return self.near or bool(self.decontaminate)

    @property
    def urls_first(self) -> bool:
        """Whether URLs are deduplicated before the fetch: with ``near`` or
        ``--max-image-repeats``. Under the default ``exact`` they are not, so
        two records that share a URL which fails keep their fetch failure
        (the bytes step still removes every copy that arrives)."""
        return self.near or self.max_repeats is not None

    @property
    def bytes_after(self) -> bool:
        return self.exact or self.max_repeats is not None


def image_dedup(settings) -> ImageDedupSettings:
    """A build's image dedup settings (``settings.stage_options``)."""
    return ImageDedupSettings.from_options(settings.stage_options)


def hashing_fetch(settings):
    """``settings.fetch``, asked for perceptual hashes when a rule needs them."""
    if image_dedup(settings).hashes and not settings.fetch.perceptual_hash:
        return dataclasses.replace(settings.fetch, perceptual_hash=True)
    return settings.fetch


def _check_distance(value) -> str | None:
    return None if value is None or 0 <= value <= 31 else "a number of bits in 0..31"


DEDUP_IMAGES = Option(
    "dedup_images",
    str,
    DEFAULT_MODE,
    "duplicate images: off, exact (one copy of each image body) or near "
    "(also perceptual near duplicates; docs/dedup.md).",
    choices=DEDUP_MODES,
)
NEAR_DUP_DISTANCE = Option(
    "near_dup_distance",
    int,
    DEFAULT_DISTANCE,
    "the Hamming radius, in bits of a 64-bit pHash, of --dedup-images near and "
    "--decontaminate images.",
    check=_check_distance,
)
MAX_IMAGE_REPEATS = Option(
    "max_image_repeats",
    int,
    0,
    "remove an image from every document when it is in more than N (OBELICS: 10); 0: off.",
    store=zero_is_off,
)
OPTIONS = (DEDUP_IMAGES, NEAR_DUP_DISTANCE, MAX_IMAGE_REPEATS)


def thumbnail(data: bytes, size: int = 64) -> str:
    """A small JPEG of an image as a ``data:`` URI (the report's dedup gallery).

    >>> from PIL import Image
    >>> import io
    >>> buffer = io.BytesIO()
    >>> Image.new("RGB", (300, 200), (0, 90, 200)).save(buffer, "JPEG")
    >>> thumbnail(buffer.getvalue())[:23]
    'data:image/jpeg;base64,'
    """
    import base64
    import io

    from corpora.record import open_image

    with open_image(data) as image:
        image = image.convert("RGB")
        image.thumbnail((size, size))
        buffer = io.BytesIO()
        image.save(buffer, "JPEG", quality=70)
    return "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def file_sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
