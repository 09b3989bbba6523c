"""Packing tokenized documents into fixed ``seq_len`` sequences.

A packed sequence holds three int32 arrays of length ``seq_len``:

- ``input_ids``: the documents' ids back to back, then ``pad_id``;
- ``segment_ids``: 1, 2, … per document, 0 for padding;
- ``positions``: 0, 1, … restarting at every document, 0 for padding.

Example (``seq_len`` 8, ``pad_id`` 0) with documents A = [1, 5, 6, 2] and
B = [1, 7, 2]::

    input_ids   [1, 5, 6, 2, 1, 7, 2, 0]
    segment_ids [1, 1, 1, 1, 2, 2, 2, 0]
    positions   [0, 1, 2, 3, 0, 1, 2, 0]

A document longer than ``seq_len`` is split into pieces at chunk boundaries;
a text chunk is cut mid-text only when it does not fit even in an empty
sequence's remaining room, and an image's slot run is never cut. Each piece is
its own segment with positions from 0.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Iterator

import numpy as np

from corpora.tokenize import Span, TokenizedDocument


class PackingError(ValueError):
    pass


@dataclasses.dataclass(frozen=True)
class Piece:
    """A document, or one piece of a document split to fit ``seq_len``."""

    doc: TokenizedDocument
    input_ids: np.ndarray
    image_indices: tuple[int, ...]
    index: int
    count: int

    @property
    def length(self) -> int:
        return int(self.input_ids.shape[0])


@dataclasses.dataclass(frozen=True)
class PackedSequence:
    input_ids: np.ndarray
    segment_ids: np.ndarray
    positions: np.ndarray
    images: tuple[bytes, ...]
    documents: tuple[dict[str, Any], ...]


def _cut_points(spans: tuple[Span, ...], seq_len: int) -> list[int]:
    """Token offsets where a document longer than ``seq_len`` is cut."""
    cuts = [0]
    start = 0  # start of the piece being filled
    for span in spans:
        if span.end - start <= seq_len:
            continue
        if span.kind == "image":
            if span.end - span.start > seq_len:
                raise PackingError(f"an image takes {span.end - span.start} tokens, more than seq_len={seq_len}")
            start = span.start
            cuts.append(start)
            continue
        # text (or bos/eos): begin a new piece at the span if the span fits there,
        # otherwise cut the text itself wherever the room runs out.
        if span.start > start and span.end - span.start <= seq_len:
            start = span.start
            cuts.append(start)
            continue
        while span.end - start > seq_len:
            start += seq_len
            cuts.append(start)
    return cuts


def split_document(doc: TokenizedDocument, seq_len: int) -> list[Piece]:
    """The pieces of ``doc``, each at most ``seq_len`` tokens."""
    if doc.length <= seq_len:
        return [Piece(doc, doc.input_ids, tuple(range(len(doc.images))), 0, 1)]
    cuts = _cut_points(doc.spans, seq_len) + [doc.length]
    pieces = []
    for index, (start, end) in enumerate(zip(cuts, cuts[1:])):
        images = tuple(s.image_index for s in doc.spans if s.kind == "image" and start <= s.start < end)
        pieces.append(Piece(doc, doc.input_ids[start:end], images, index, len(cuts) - 1))
    return pieces


def assemble(pieces: list[Piece], seq_len: int, pad_id: int) -> PackedSequence:
    """Lay ``pieces`` out in one sequence, in the order given."""
    input_ids = np.full(seq_len, pad_id, dtype=np.int32)
    segment_ids = np.zeros(seq_len, dtype=np.int32)
    positions = np.zeros(seq_len, dtype=np.int32)
    images: list[bytes] = []
    documents = []
    offset = 0
    for segment, piece in enumerate(pieces, start=1):
        end = offset + piece.length
        if end > seq_len:
            raise PackingError(f"pieces take {end} tokens, more than seq_len={seq_len}")
        input_ids[offset:end] = piece.input_ids
        segment_ids[offset:end] = segment
        positions[offset:end] = np.arange(piece.length, dtype=np.int32)
        offset = end
        piece_images = [piece.doc.images[i] for i in piece.image_indices]
        images.extend(img.data or b"" for img in piece_images)
        entry = dict(piece.doc.provenance)
        if piece.count > 1:
            entry["images"] = [entry["images"][i] for i in piece.image_indices]
        image_tokens = sum(s.end - s.start for s in piece.doc.spans
                           if s.kind == "image" and s.image_index in piece.image_indices)
        entry.update(
            segment=segment,
            tokens=piece.length,
            image_tokens=image_tokens,
            split=piece.count > 1,
            piece=piece.index,
            pieces=piece.count,
        )
        documents.append(entry)
    return PackedSequence(input_ids, segment_ids, positions, tuple(images), tuple(documents))


def pack_greedy(docs: Iterable[TokenizedDocument], seq_len: int, pad_id: int) -> Iterator[PackedSequence]:
    """Pack documents in the order given into one open sequence at a time."""
    current: list[Piece] = []
    used = 0
    for doc in docs:
        for piece in split_document(doc, seq_len):
            if used + piece.length > seq_len:
                yield assemble(current, seq_len, pad_id)
                current, used = [], 0
            current.append(piece)
            used += piece.length
    if current:
        yield assemble(current, seq_len, pad_id)
