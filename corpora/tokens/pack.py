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

A document longer than ``seq_len`` is split into pieces at chunk boundaries,
and never between an image and the text after it: the BOS and each run of
images travel with the text that follows them, so an image that does not
fit with its text opens the next piece; a text chunk is cut mid-text only
when it does not fit in a piece of its own, and an image's slot run is
never cut. No piece of a split document is shorter than
:func:`min_piece_tokens` (a shorter one is merged, its cut moved, or it is
dropped and counted). The first piece keeps the document's BOS, the last
its EOS; pieces in between have neither. Each piece is its own segment with
positions from 0. ``docs/shard-format.md`` states the rules in full.

The split and placement are planned on lightweight :class:`PieceRef` metadata
(document key, piece bounds), so an engine can plan a group of documents
without holding their tokens or images, and cut the pieces out later:
:mod:`corpora.tokens.pack_groups` plans a build's packing that way, group by group.
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
import itertools
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from corpora.record import ImageChunk
from corpora.tokens.tokenizer import Span, TokenizedDocument

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
    # on the first piece: the pieces and tokens of the document dropped as too
    # short to stand alone (:data:`SHORT_PIECE`), counted in its json entry
    dropped_pieces: int = 0
    dropped_tokens: int = 0

    @property
    def length(self) -> int:
        return self.end - self.start

    @property
    def whole(self) -> bool:
        """The whole document, unsplit."""
        return self.count == 1 and not self.dropped_pieces

    def bounds(self) -> tuple[int, ...]:
        """Everything but the key, as a plain tuple: ``PieceRef(key, *bounds)``
        makes it again (the drop counts only where there are any)."""
        if self.dropped_pieces:
            return self.index, self.count, self.start, self.end, *self.dropped
        return self.index, self.count, self.start, self.end

    @property
    def dropped(self) -> tuple[int, int]:
        return self.dropped_pieces, self.dropped_tokens


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
    digest = hashlib.blake2b(np.ascontiguousarray(doc.input_ids), digest_size=8)  # no copy
    digest.update(repr(sorted(doc.provenance.items())).encode("utf-8"))
    if doc.images:
        digest.update(b"".join(img.data or b"" for img in doc.images))
    return f"{doc.id}#{digest.hexdigest()}"


# A piece of a split document holds at least this many tokens (fewer where
# seq_len is tiny: an eighth of it, and never fewer than 2). A shorter piece is
# merged into a neighbour's room, or its cut moved, or it is dropped and
# counted as ``short_piece``: a lone EOS or a few words teach nothing.
MIN_PIECE_TOKENS = 8
SHORT_PIECE = "short_piece"  # the reason a piece of a split document is dropped


def min_piece_tokens(seq_len: int) -> int:
    """The fewest tokens a piece of a split document holds at ``seq_len``.

    >>> [min_piece_tokens(n) for n in (8, 32, 128, 2048)]
    [2, 4, 8, 8]
    """
    return min(MIN_PIECE_TOKENS, max(2, seq_len // 8))


@dataclasses.dataclass(frozen=True)
class _Unit:
    """Tokens ``[start, end)`` that a split keeps together where it can: a head
    ``[start, text)`` that is never cut after its first token (the BOS and
    the run of images before a text) and the text ``[text, end)`` it
    introduces, which may be cut once one of its tokens is in the head's piece.
    The head's images are ``image_starts`` (the only places a head too long
    for one piece is cut)."""

    start: int
    text: int
    end: int
    image_starts: tuple[int, ...]
    has_text: bool  # a text follows the head (not only the EOS)


def _units(spans: Sequence[Span], length: int) -> list[_Unit]:
    """A document's spans as :class:`_Unit` s: the BOS and each run of images
    join the text that follows them; the EOS joins the unit before it."""
    units: list[_Unit] = []
    head: int | None = None  # start of a head waiting for its text
    images: list[int] = []
    for span in spans:
        if span.kind in ("bos", "image"):
            head = span.start if head is None else head
            if span.kind == "image":
                images.append(span.start)
        elif span.kind == "eos" and head is None and units:
            units[-1] = dataclasses.replace(units[-1], end=span.end)
        else:  # text, or an EOS that is all that follows a head
            start = span.start if head is None else head
            units.append(_Unit(start, span.start, span.end, tuple(images), span.kind == "text"))
            head, images = None, []
    if head is not None:  # images at the very end, no text after them
        units.append(_Unit(head, length, length, tuple(images), False))
    return units


def _head_cuts(unit: _Unit, start: int, seq_len: int) -> list[int]:
    """Cuts inside a head too long for one piece with a token of its text:
    between its images, so that the last piece holds the most images that
    fit with one text token (the images before them go in pieces of their
    own: nothing can keep them with their text). Where only an EOS follows
    the images, a cut that leaves the BOS alone is the last resort."""
    room = seq_len - (1 if unit.end > unit.text else 0)
    starts = [s for s in unit.image_starts if s > start]
    if not starts:
        return []
    fitting = [s for s in starts if unit.text - s <= room]
    if not unit.has_text and start == unit.start and start not in unit.image_starts:
        fitting = [s for s in fitting if s > start + 1] or fitting
    last = fitting[0] if fitting else starts[-1]
    cuts = []
    for here, after in zip(starts, starts[1:] + [unit.text]):
        if here == last or after - start > seq_len:
            cuts.append(here)
            start = here
        if here == last:
            break
    return cuts


def _cut_points(spans: Sequence[Span], length: int, seq_len: int) -> list[int]:
    """Token offsets where a document longer than ``seq_len`` is cut, before
    short pieces are mended (:func:`_mend_short`)."""
    for span in spans:
        if span.kind == "image" and span.end - span.start > seq_len:
            raise PackingError(
                f"an image takes {span.end - span.start} tokens, more than seq_len={seq_len}"
            )
    shortest = min_piece_tokens(seq_len)
    cuts = [0]
    start = 0  # start of the piece being filled
    for unit in _units(spans, length):
        if unit.end - start <= seq_len:
            continue
        head_fits = unit.text - start + (1 if unit.end > unit.text else 0) <= seq_len
        if unit.start > start and (
            unit.end - unit.start <= seq_len or unit.image_starts or not head_fits
        ):
            # the unit opens the next piece: where it fits there whole, where
            # its images would otherwise end this one with little of their
            # text, and where its head and a token of its text do not fit
            # here; not after a piece too short to stand alone, where they fit
            if unit.start - start >= shortest or not head_fits:
                start = unit.start
                cuts.append(start)
        if unit.text - start + (1 if unit.end > unit.text else 0) > seq_len:
            for cut in _head_cuts(unit, start, seq_len):
                start = cut
                cuts.append(cut)
        while unit.end - start > seq_len:  # fill the piece; the text is cut where room runs out
            start += seq_len
            cuts.append(start)
    return cuts


def _mend_short(
    cuts: list[int], spans: Sequence[Span], length: int, seq_len: int
) -> tuple[list[list[int]], int, int]:
    """The pieces ``[start, end]`` between ``cuts``, none shorter than
    :func:`min_piece_tokens`: a short piece is merged into the piece before
    it (or after it) where their tokens fit in ``seq_len``, else the cut
    between them moves to a place that keeps both long enough and no image
    from its text, else the piece is dropped. Returns the pieces, and the
    pieces and tokens dropped."""
    shortest = min_piece_tokens(seq_len)
    pieces = [[a, b] for a, b in zip(cuts, cuts[1:] + [length])]
    if all(b - a >= shortest for a, b in pieces):
        return pieces, 0, 0
    forbidden = _forbidden_cuts(spans)
    dropped = dropped_tokens = 0
    i = 0
    while i < len(pieces):
        start, end = pieces[i]
        if end - start >= shortest:
            i += 1
            continue
        before = pieces[i - 1] if i and pieces[i - 1][1] == start else None
        after = pieces[i + 1] if i + 1 < len(pieces) and pieces[i + 1][0] == end else None
        if before is not None and end - before[0] <= seq_len:
            before[1] = end
            del pieces[i]
        elif after is not None and after[1] - start <= seq_len:
            after[0] = start
            del pieces[i]
        elif before is not None and (
            cut := next(
                (
                    p
                    for p in range(end - shortest, max(before[0] + shortest, end - seq_len) - 1, -1)
                    if not forbidden(p)
                ),
                None,
            )
        ):
            before[1] = pieces[i][0] = cut
        elif after is not None and (
            cut := next(
                (
                    p
                    for p in range(start + shortest, min(after[1] - shortest, start + seq_len) + 1)
                    if not forbidden(p)
                ),
                None,
            )
        ):
            after[0] = pieces[i][1] = cut
        else:
            del pieces[i]
            dropped += 1
            dropped_tokens += end - start
    return pieces, dropped, dropped_tokens


def _forbidden_cuts(spans: Sequence[Span]):
    """Whether a cut at a token offset would leave the BOS alone, fall inside
    a run of images, or part a run from the text that follows it."""
    runs: list[tuple[int, int, bool]] = []  # (start, end, text follows)
    for index, span in enumerate(spans):
        if span.kind != "image":
            continue
        follows = index + 1 < len(spans) and spans[index + 1].kind == "text"
        if runs and runs[-1][1] == span.start:
            runs[-1] = (runs[-1][0], span.end, follows)
        else:
            runs.append((span.start, span.end, follows))
    starts = [run[0] for run in runs]
    bos = bool(spans) and spans[0].kind == "bos"

    def forbidden(cut: int) -> bool:
        if bos and cut == 1:
            return True
        where = bisect.bisect_left(starts, cut) - 1
        if where < 0:
            return False
        start, end, follows = runs[where]
        return start < cut < end or (cut == end and follows)

    return forbidden


def plan_document(key: str, length: int, spans: Sequence[Span], seq_len: int) -> list[PieceRef]:
    """The pieces of a document of ``length`` tokens, each at most ``seq_len``.

    An image opens the piece that holds the text after it: here the image
    (5-9) and its text (9-11) do not fit after the first text (1-5), so the
    cut falls before the image, never between it and its text:

    >>> from corpora.tokens.tokenizer import Span
    >>> spans = [Span("bos", 0, 1), Span("text", 1, 5), Span("image", 5, 9, 0), Span("text", 9, 11),
    ...          Span("eos", 11, 12)]
    >>> [(p.start, p.end) for p in plan_document("d", 12, spans, 8)]
    [(0, 5), (5, 12)]

    A text longer than ``seq_len`` fills each piece; a tail shorter than
    :func:`min_piece_tokens` (here the EOS alone, 16-17) takes tokens from
    the piece before it:

    >>> spans = [Span("bos", 0, 1), Span("text", 1, 16), Span("eos", 16, 17)]
    >>> [(p.start, p.end) for p in plan_document("d", 17, spans, 16)]
    [(0, 15), (15, 17)]
    """
    if length <= seq_len:
        return [PieceRef(key, 0, 1, 0, length)]
    cuts = _cut_points(spans, length, seq_len)
    pieces, dropped, dropped_tokens = _mend_short(cuts, spans, length, seq_len)
    count = len(pieces)
    return [
        PieceRef(
            key, i, count, start, end, *((dropped, dropped_tokens) if i == 0 and dropped else ())
        )
        for i, (start, end) in enumerate(pieces)
    ]


def plan_pieces(doc: TokenizedDocument, seq_len: int) -> DocumentPlan:
    """A document's :func:`doc_key` and its pieces (:func:`plan_document`)."""
    key = doc_key(doc)
    return DocumentPlan(key, tuple(plan_document(key, doc.length, doc.spans, seq_len)))


def cut_piece(doc: TokenizedDocument, ref: PieceRef) -> Piece:
    """Materialise ``ref`` from ``doc``: its ids, its images and its ``json`` entry."""
    if ref.whole:  # no slicing, no filtering
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
    entry["images"] = [entry["images"][s.image_index] for s in in_piece]
    entry.update(
        tokens=ref.length,
        image_tokens=sum(s.end - s.start for s in in_piece),
        split=True,
        piece=ref.index,
        pieces=ref.count,
    )
    if ref.dropped_pieces:
        entry["dropped"] = {
            "reason": SHORT_PIECE,
            "pieces": ref.dropped_pieces,
            "tokens": ref.dropped_tokens,
        }
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
        >>> from corpora.tokens.tokenizer import Span, TokenizedDocument
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
