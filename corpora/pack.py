"""Packing tokenized documents into fixed ``seq_len`` sequences.

A packed sequence holds three int32 arrays of length ``seq_len``:

- ``input_ids``: the pieces' ids back to back, then ``pad_id``;
- ``segment_ids``: 1, 2, … per piece, 0 for padding;
- ``positions``: 0, 1, … restarting at every piece, 0 for padding.

Packing is **best-fit decreasing over a bounded buffer**: pieces are collected
``buffer_size`` at a time, sorted longest first (ties by document key), and each
goes into the open sequence with the least room that still holds it, or a new
one. After each buffer only the ``max_open`` sequences with the most room stay
open; the others are emitted. Memory is bounded by the buffer and the open
sequences however long the input, and the output depends only on the order
of the input (a build feeds each group's documents in key order).

A document longer than ``seq_len`` is split into pieces at chunk boundaries;
a text chunk is cut mid-text only when it does not fit in the room left in the
piece being filled even after starting a new piece, and an image's slot run is
never cut. The first piece keeps the document's BOS, the last its EOS;
pieces in between have neither. Each piece is its own segment with positions
from 0.

The split and placement are planned on lightweight :class:`PieceRef` metadata
(document key, piece bounds), so an engine can plan a group of documents
without holding their tokens or images, and cut the pieces out later:
:mod:`corpora.pack_groups` plans a build's packing that way, group by group.
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
import itertools
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from corpora.record import ImageChunk
from corpora.tokenizer import Span, TokenizedDocument

DEFAULT_BUFFER_SIZE = 10_000
DEFAULT_MAX_OPEN = 512
EMPTY_DOCUMENT = "empty_document"  # the drop reason of a document with no tokens


class PackingError(ValueError):
    pass


@dataclasses.dataclass(frozen=True, order=True)
class PieceRef:
    """Tokens ``[start, end)`` of the document ``key``: piece ``index`` of ``count``."""

    key: str
    index: int
    count: int
    start: int
    end: int

    @property
    def length(self) -> int:
        return self.end - self.start


@dataclasses.dataclass(frozen=True)
class Piece:
    """A piece cut out of a document: its ids, its images and its ``json`` entry."""

    input_ids: np.ndarray
    images: tuple[ImageChunk, ...]
    entry: dict[str, Any]

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


@dataclasses.dataclass(frozen=True)
class DocumentPlan:
    """A document's key and the pieces it is cut into: no bytes."""

    key: str
    pieces: tuple[PieceRef, ...]

    @property
    def record_id(self) -> str:
        return self.key.rpartition("#")[0]

    @property
    def empty(self) -> bool:
        """No tokens at all: nothing to pack (dropped as ``empty_document``)."""
        return all(piece.length == 0 for piece in self.pieces)


def doc_key(doc: TokenizedDocument) -> str:
    """The document's id plus a digest of its content.

    Ids are unique within a corpus by contract; the digest makes a repeated id
    harmless: two documents with the same key are byte-identical, so either
    can stand for the other when bytes are joined back to a plan.
    """
    digest = hashlib.blake2b(doc.input_ids.tobytes(), digest_size=8)
    digest.update(repr(sorted(doc.provenance.items())).encode("utf-8"))
    digest.update(b"".join(img.data or b"" for img in doc.images))
    return f"{doc.id}#{digest.hexdigest()}"


def _cut_points(spans: Sequence[Span], seq_len: int) -> list[int]:
    """Token offsets where a document longer than ``seq_len`` is cut."""
    cuts = [0]
    start = 0  # start of the piece being filled
    for span in spans:
        if span.end - start <= seq_len:
            continue
        if span.kind == "image":
            if span.end - span.start > seq_len:
                raise PackingError(
                    f"an image takes {span.end - span.start} tokens, more than seq_len={seq_len}"
                )
            start = span.start
            cuts.append(start)
            continue
        # text (or bos/eos): begin a new piece at the span if the span fits there,
        # otherwise fill the current piece and cut the text where the room runs out.
        if span.start > start and span.end - span.start <= seq_len:
            start = span.start
            cuts.append(start)
            continue
        while span.end - start > seq_len:
            start += seq_len
            cuts.append(start)
    return cuts


def plan_document(key: str, length: int, spans: Sequence[Span], seq_len: int) -> list[PieceRef]:
    """The pieces of a document of ``length`` tokens, each at most ``seq_len``.

    >>> from corpora.tokenizer import Span
    >>> spans = [Span("bos", 0, 1), Span("text", 1, 5), Span("image", 5, 9, 0), Span("text", 9, 11),
    ...          Span("eos", 11, 12)]
    >>> [(p.start, p.end) for p in plan_document("d", 12, spans, 8)]
    [(0, 5), (5, 12)]
    """
    if length <= seq_len:
        return [PieceRef(key, 0, 1, 0, length)]
    cuts = _cut_points(spans, seq_len) + [length]
    count = len(cuts) - 1
    return [
        PieceRef(key, i, count, start, end) for i, (start, end) in enumerate(zip(cuts, cuts[1:]))
    ]


def plan_pieces(doc: TokenizedDocument, seq_len: int) -> DocumentPlan:
    """A document's :func:`doc_key` and its pieces (:func:`plan_document`)."""
    key = doc_key(doc)
    return DocumentPlan(key, tuple(plan_document(key, doc.length, doc.spans, seq_len)))


def cut_piece(doc: TokenizedDocument, ref: PieceRef) -> Piece:
    """Materialise ``ref`` from ``doc``: its ids, its images and its ``json`` entry."""
    if ref.count == 1:  # the whole document: no slicing, no filtering
        entry = {
            **doc.provenance,
            "tokens": ref.length,
            "image_tokens": doc.image_tokens,
            "split": False,
            "piece": 0,
            "pieces": 1,
        }
        return Piece(doc.input_ids, doc.images, entry)
    in_piece = [s for s in doc.spans if s.kind == "image" and ref.start <= s.start < ref.end]
    entry = dict(doc.provenance)
    if ref.count > 1:
        entry["images"] = [entry["images"][s.image_index] for s in in_piece]
    entry.update(
        tokens=ref.length,
        image_tokens=sum(s.end - s.start for s in in_piece),
        split=ref.count > 1,
        piece=ref.index,
        pieces=ref.count,
    )
    return Piece(
        doc.input_ids[ref.start : ref.end],
        tuple(doc.images[s.image_index] for s in in_piece),
        entry,
    )


def split_document(doc: TokenizedDocument, seq_len: int) -> list[Piece]:
    """The pieces of ``doc``, each at most ``seq_len`` tokens."""
    return [cut_piece(doc, ref) for ref in plan_pieces(doc, seq_len).pieces]


def assemble(pieces: Sequence[Piece], seq_len: int, pad_id: int) -> PackedSequence:
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
        images.extend(img.data or b"" for img in piece.images)
        documents.append({**piece.entry, "segment": segment})
    return PackedSequence(input_ids, segment_ids, positions, tuple(images), tuple(documents))


def assemble_sequences(
    placed: Iterable[tuple[int, int, Piece]], seq_len: int, pad_id: int
) -> list[tuple[int, PackedSequence]]:
    """``(number, slot, piece)`` triples, in any order, as the sequences they
    make: ``(number, sequence)`` in number order, pieces in slot order."""
    ordered = sorted(placed, key=lambda item: (item[0], item[1]))
    return [
        (number, assemble([piece for _, _, piece in group], seq_len, pad_id))
        for number, group in itertools.groupby(ordered, key=lambda item: item[0])
    ]


class BestFitPacker:
    """Best-fit decreasing over a bounded buffer of pieces (see the module doc).

    ``add`` and ``flush`` return the sequences that are finished, each a list
    of :class:`PieceRef` in placement order. The result depends only on the
    order of the pieces added.
    """

    def __init__(
        self, seq_len: int, buffer_size: int = DEFAULT_BUFFER_SIZE, max_open: int = DEFAULT_MAX_OPEN
    ):
        if buffer_size < 1 or max_open < 0:
            raise ValueError("buffer_size must be at least 1 and max_open at least 0")
        self.seq_len = seq_len
        self.buffer_size = buffer_size
        self.max_open = max_open
        self._buffer: list[PieceRef] = []
        self._bins: dict[int, list[PieceRef]] = {}
        self._rooms: list[tuple[int, int]] = []  # sorted (room left, bin number) of open bins
        self._next_bin = 0

    def add(self, ref: PieceRef) -> list[list[PieceRef]]:
        if ref.length > self.seq_len:
            raise PackingError(
                f"piece of {ref.length} tokens is longer than seq_len={self.seq_len}"
            )
        if ref.length == 0:
            raise PackingError(f"empty piece {ref}")
        self._buffer.append(ref)
        if len(self._buffer) < self.buffer_size:
            return []
        return self._place(final=False)

    def flush(self) -> list[list[PieceRef]]:
        return self._place(final=True)

    def _place(self, final: bool) -> list[list[PieceRef]]:
        done: list[int] = []
        for ref in sorted(self._buffer, key=lambda r: (-r.length, r.key, r.index)):
            where = bisect.bisect_left(self._rooms, (ref.length, -1))
            if where < len(self._rooms):
                room, number = self._rooms.pop(where)
            else:
                room, number = self.seq_len, self._next_bin
                self._next_bin += 1
                self._bins[number] = []
            self._bins[number].append(ref)
            room -= ref.length
            if room == 0:
                done.append(number)
            else:
                bisect.insort(self._rooms, (room, number))
        self._buffer = []
        keep = 0 if final else self.max_open
        if len(self._rooms) > keep:
            # the fullest bins are the least likely to take another piece
            cut = len(self._rooms) - keep
            done += [number for _, number in self._rooms[:cut]]
            self._rooms = self._rooms[cut:]
        return [self._bins.pop(number) for number in sorted(done)]


def pack_plan(
    refs: Iterable[PieceRef],
    seq_len: int,
    packed: bool = True,
    buffer_size: int = DEFAULT_BUFFER_SIZE,
    max_open: int = DEFAULT_MAX_OPEN,
) -> Iterator[list[PieceRef]]:
    """The sequences for ``refs``: best-fit packed, or one piece each when
    ``packed`` is false (the unpacked mode)."""
    if not packed:
        for ref in refs:
            if ref.length > seq_len:
                raise PackingError(f"piece of {ref.length} tokens is longer than seq_len={seq_len}")
            yield [ref]
        return
    packer = BestFitPacker(seq_len, buffer_size, max_open)
    for ref in refs:
        yield from packer.add(ref)
    yield from packer.flush()


def pack(
    docs: Iterable[TokenizedDocument],
    seq_len: int,
    pad_id: int,
    packed: bool = True,
    buffer_size: int = DEFAULT_BUFFER_SIZE,
    max_open: int = DEFAULT_MAX_OPEN,
) -> Iterator[PackedSequence]:
    """Pack documents into sequences, best-fit decreasing over a bounded buffer.

    Example (``seq_len`` 8, ``pad_id`` 0) with documents A = [1, 5, 6, 2],
    B = [1, 7, 7, 7, 2] and C = [1, 9, 9, 2]: B (5 tokens) opens sequence 1,
    A and C (4 tokens each) don't fit there; A opens sequence 2 and C fills it::

        >>> import numpy as np
        >>> from corpora.tokenizer import Span, TokenizedDocument
        >>> def doc(name, ids):
        ...     n = len(ids)
        ...     spans = (Span("bos", 0, 1), Span("text", 1, n - 1), Span("eos", n - 1, n))
        ...     ids = np.array(ids, np.int32)
        ...     return TokenizedDocument(name, "c", ids, spans, (), {"id": name})
        >>> a, b, c = doc("A", [1, 5, 6, 2]), doc("B", [1, 7, 7, 7, 2]), doc("C", [1, 9, 9, 2])
        >>> for s in pack([a, b, c], seq_len=8, pad_id=0):
        ...     print(s.input_ids, s.segment_ids, s.positions, [d["id"] for d in s.documents])
        [1 7 7 7 2 0 0 0] [1 1 1 1 1 0 0 0] [0 1 2 3 4 0 0 0] ['B']
        [1 5 6 2 1 9 9 2] [1 1 1 1 2 2 2 2] [0 1 2 3 0 1 2 3] ['A', 'C']

    Greedy packing in input order (one open sequence) would need three
    sequences here: [A], [B], [C].
    """
    held: dict[str, list] = {}  # key -> [document, pieces not yet emitted]

    def refs() -> Iterator[PieceRef]:
        for doc in docs:
            plan = plan_pieces(doc, seq_len)
            if plan.empty:
                raise PackingError(f"document {doc.id!r} has no tokens ({EMPTY_DOCUMENT})")
            # documents with one key are byte-identical: either stands for both
            held.setdefault(plan.key, [doc, 0])[1] += len(plan.pieces)
            yield from plan.pieces

    for bin_refs in pack_plan(refs(), seq_len, packed, buffer_size, max_open):
        pieces = []
        for ref in bin_refs:
            entry = held[ref.key]
            pieces.append(cut_piece(entry[0], ref))
            entry[1] -= 1
            if entry[1] == 0:
                del held[ref.key]
        yield assemble(pieces, seq_len, pad_id)


def pack_greedy(
    docs: Iterable[TokenizedDocument], seq_len: int, pad_id: int
) -> Iterator[PackedSequence]:
    """Pack documents in the order given into one open sequence at a time
    (seqio-style greedy packing; the benchmark's baseline)."""
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
