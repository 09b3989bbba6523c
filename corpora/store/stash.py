"""References through the shuffles: a build's images written once, carried
as small references, read back by the shard writer.

After a document is tokenized, its images (the fetch stage's final JPEGs)
are written to the build's stash (``{output}/.corpora/images``, a store
split like any other) and each :class:`~corpora.record.ImageChunk` keeps,
instead of its bytes, where they are (:data:`STASHED` in its ``meta``). Every
grouping after that (the join of documents to their packing plan, the
grouping by shard) then moves a few hundred bytes per image rather than the
image, so a local build's memory grows with the number of records, not with
their bytes, and a distributed runner's shuffle volume drops by the images'
size. The shard writer puts the bytes back (:func:`unstash_piece`, SHA-256
checked) just before it writes, so the shards are byte for byte those of a
build that carried the bytes.

    >>> import hashlib, io, tempfile
    >>> from PIL import Image
    >>> from corpora.tokens.pack import Piece
    >>> from corpora.record import ImageChunk
    >>> from corpora.store.files import Files
    >>> buffer = io.BytesIO()
    >>> Image.new("RGB", (8, 8), "red").save(buffer, "JPEG")
    >>> data = buffer.getvalue()
    >>> chunk = ImageChunk("https://a.example/1.jpg", data, 8, 8, hashlib.sha256(data).hexdigest())
    >>> with stash_writer(Files(tempfile.mkdtemp())) as writer:
    ...     small = stash_chunk(chunk, writer)
    >>> small.data is None and STASHED in small.meta
    True
    >>> import numpy as np
    >>> with ImageReader() as reader:
    ...     unstash_piece(Piece(np.zeros(1), (small,), {}), reader).images[0] == chunk
    True
"""

from __future__ import annotations

import dataclasses
import hashlib
import pickle
import uuid
from typing import Any

from corpora.record import ImageChunk
from corpora.store.files import Files
from corpora.store.outcomes import ImageRef
from corpora.store.reader import ImageReader
from corpora.store.writer import StoreSpec, StoreWriter

STASH = ".corpora/images"  # under the build's output; removed once the manifest is written
RECORDS = ".corpora/records"  # batches of records as read, spread over the workers
DOCUMENTS = ".corpora/documents"  # the tokenized documents, images as references
SEQUENCES = ".corpora/sequences"  # a text build's packed groups, one file per group
INDEX_PARTS = ".corpora/index"  # each batch's dedup index rows, merged into dedup_index.parquet
STASHES = (STASH, RECORDS, DOCUMENTS, SEQUENCES, INDEX_PARTS)
STASHED = "stashed"  # an image chunk's meta key: (tar, offset, size, sha256) of its bytes
_SPLIT = "images"


def stash_writer(files: Files) -> StoreWriter:
    """A writer of a build's stash (one per bundle; parts never collide)."""
    return StoreWriter(files, _SPLIT, StoreSpec())


def stash_chunk(chunk: ImageChunk, writer: StoreWriter) -> ImageChunk:
    """``chunk`` with its bytes written and replaced by their place."""
    if chunk.data is None:
        return chunk
    ref = writer.put(chunk.url, chunk.data, "JPEG", chunk.width or 0, chunk.height or 0).ref
    return dataclasses.replace(
        chunk, data=None, meta={**chunk.meta, STASHED: (ref.tar, ref.offset, ref.size, ref.sha256)}
    )


def stash_images(doc, writer: StoreWriter):
    """A :class:`~corpora.tokens.tokenizer.TokenizedDocument` whose images are references."""
    return dataclasses.replace(doc, images=tuple(stash_chunk(c, writer) for c in doc.images))


def unstash_chunk(chunk: ImageChunk, reader: ImageReader) -> ImageChunk:
    place = chunk.meta.get(STASHED)
    if place is None:
        return chunk
    data = reader.read(ImageRef(*place))
    meta = {k: v for k, v in chunk.meta.items() if k != STASHED}
    return dataclasses.replace(chunk, data=data, meta=meta)


def unstash_piece(piece, reader: ImageReader):
    """A :class:`~corpora.tokens.pack.Piece` with its images' bytes read back."""
    return dataclasses.replace(piece, images=tuple(unstash_chunk(c, reader) for c in piece.images))


class BlobWriter:
    """Pickled values (batches of records, tokenized documents) written into
    files of about ``part_bytes`` under ``files``' root, each part under a
    fresh name; :meth:`put` returns where a value will be, an
    :class:`~corpora.store.outcomes.ImageRef` that :func:`read_blob` reads back
    (SHA-256 checked) once the part is flushed. The caller flushes before it
    hands the references on.

        >>> import tempfile
        >>> from corpora.store.reader import ImageReader
        >>> writer = BlobWriter(Files(tempfile.mkdtemp()))
        >>> refs = [writer.put({"id": "a"}), writer.put([1, 2, 3])]
        >>> writer.flush()
        >>> with ImageReader() as reader:
        ...     [read_blob(ref, reader) for ref in refs]
        [{'id': 'a'}, [1, 2, 3]]
    """

    def __init__(self, files: Files, part_bytes: int = 64 << 20):
        self._files = files
        self._part_bytes = part_bytes
        self._parts: list[bytes] = []
        self._size = 0
        self._name = ""

    def put(self, value: Any) -> ImageRef:
        if not self._parts:
            self._name = f"{uuid.uuid4().hex}.bin"
        data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        ref = ImageRef(
            self._files.url(self._name), self._size, len(data), hashlib.sha256(data).hexdigest()
        )
        self._parts.append(data)
        self._size += len(data)
        if self._size >= self._part_bytes:
            self.flush()
        return ref

    def flush(self) -> None:
        """Write the part being filled (atomically), if it holds anything."""
        if self._parts:
            self._files.write(self._name, b"".join(self._parts))
            self._parts, self._size = [], 0


def read_blob(ref: ImageRef, reader: ImageReader) -> Any:
    """The value :meth:`BlobWriter.put` stored at ``ref``."""
    return pickle.loads(reader.read(ref))
