"""The record that flows through every stage: a document of ordered chunks.

A stage takes a :class:`Document` and returns a :class:`Document` (kept or
changed), a :class:`Drop` (dropped, with a named reason that is counted), or an
iterator of either (a layout that splits one document into several). Nothing
is ever dropped without a reason: at the end of a build

    input records = kept + sum(dropped by reason)

and the manifest's funnel says so.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
from typing import Any, Mapping, Union


@dataclasses.dataclass(frozen=True)
class TextChunk:
    text: str

    kind = "text"


@dataclasses.dataclass(frozen=True)
class ImageChunk:
    """An image in reading order.

    Before fetching only ``url`` is set; the fetch stage fills in the encoded
    bytes (JPEG after resizing), their size and sha256.
    """

    url: str
    data: bytes | None = None
    width: int | None = None
    height: int | None = None
    sha256: str | None = None
    scores: Mapping[str, float] = dataclasses.field(default_factory=dict)
    meta: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    kind = "image"

    @property
    def fetched(self) -> bool:
        return self.data is not None


Chunk = Union[TextChunk, ImageChunk]


@dataclasses.dataclass(frozen=True)
class Document:
    """One record: a stable id, chunks in reading order, and provenance.

    ``id`` derives from the source (COYO id; MMC4 url + line; C4 url; WIT
    image_url + page_url), never from execution order.
    """

    id: str
    corpus: str
    chunks: tuple[Chunk, ...]
    source_url: str | None = None
    meta: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def images(self) -> list[ImageChunk]:
        return [c for c in self.chunks if isinstance(c, ImageChunk)]

    @property
    def texts(self) -> list[TextChunk]:
        return [c for c in self.chunks if isinstance(c, TextChunk)]

    def replace(self, **changes: Any) -> "Document":
        return dataclasses.replace(self, **changes)

    def with_meta(self, **entries: Any) -> "Document":
        return dataclasses.replace(self, meta={**self.meta, **entries})


@dataclasses.dataclass(frozen=True)
class Drop:
    """A record that left the build, and why.

    ``reason`` is a short snake_case name (``bad_json``, ``http_404``); it
    becomes a Beam counter and a key of the manifest funnel's ``dropped`` map.
    ``count`` is how many funnel units this drop stands for (an unparseable
    line counts once; see :mod:`corpora.stats.funnel`).
    """

    reason: str
    record_id: str
    detail: str = ""
    count: int = 1
    url: str | None = None


StageResult = Union[Document, Drop, None]


def stable_id(*parts: str | int) -> str:
    """A short id that depends only on its parts (used for derived records)."""
    digest = hashlib.sha1("\x1f".join(str(p) for p in parts).encode("utf-8")).hexdigest()
    return digest[:16]


def stable_hash(text: str) -> int:
    """A 64-bit hash of ``text`` that is the same in every process and run.

    Python's ``hash`` is salted per process, so it must never decide shard or
    group assignment.
    """
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "big")


# The image formats a build decodes (docs/fetch.md); Pillow's other decoders
# (EPS, which runs Ghostscript, among a few dozen) are never reached: an image
# in another format is not_image.
IMAGE_FORMATS = ("JPEG", "PNG", "WEBP", "GIF", "BMP", "TIFF", "AVIF")


def open_image(data: bytes):
    """Pillow's ``Image.open`` of ``data``, trying only :data:`IMAGE_FORMATS`
    (AVIF where this Pillow has it); raises as ``Image.open`` does.

    >>> open_image(b"%!PS-Adobe-3.0 EPSF-3.0\\n%%BoundingBox: 0 0 8 8\\n")
    Traceback (most recent call last):
    ...
    PIL.UnidentifiedImageError: cannot identify image file <_io.BytesIO object at ...>
    """
    from PIL import Image

    Image.init()
    formats = [name for name in IMAGE_FORMATS if name in Image.OPEN]
    return Image.open(io.BytesIO(data), formats=formats)
