"""A build's packing, planned on metadata in independent groups.

A build packs in this order (the Beam steps of ``pipelines/transforms.py``
call each of these functions, and nothing else decides a byte):

1. plan each document: :func:`corpora.tokens.pack.plan_pieces` (its key and pieces);
2. route it to a packing group: :func:`group_of`, by a stable hash of its key;
3. plan each group: :func:`plan_group` (documents in key order, empty ones
   dropped as ``empty_document``, pieces best-fit packed);
4. number the sequences globally, groups in order: :func:`group_offsets`;
5. cut each piece out of its document: :func:`corpora.tokens.pack.cut_piece`;
6. lay each sequence out: :func:`corpora.tokens.pack.assemble_sequences`.

The number of groups depends only on the input, never on the workers, so the
shards are the same whatever runs the build. :func:`corpora.tokens.pack.pack` packs
documents held in memory with the same functions, in the order given.

A text corpus packs where it tokenizes instead (:func:`packs_where_tokenized`):
its packing groups are the batches its reader hands on (:data:`TEXT_GROUP_SIZES`
records of one input file, in read order, whatever the workers), and each
batch is tokenized, planned and packed in one step (:func:`pack_group`, the
same plan, order and cut as above). A group's sequences leave it as a
:class:`PackedGroup`: the ids of its pieces back to back and their lengths,
all a shard writer needs (:func:`group_sequences` lays them out). Groups are
numbered by :attr:`PackedGroup.order`, a digest of their documents' keys.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Sequence

import numpy as np

from corpora.record import Drop, stable_hash
from corpora.tokens.pack import (
    DEFAULT_BUFFER_SIZE,
    DEFAULT_MAX_OPEN,
    EMPTY_DOCUMENT,
    DocumentPlan,
    PackedSequence,
    PackingError,
    PieceRef,
    cut_piece,
    pack_plan,
    plan_pieces,
)

if TYPE_CHECKING:
    from corpora.config.settings import BuildSettings
    from corpora.config.spec import CorpusSpec
    from corpora.tokens.tokenizer import TokenizedDocument

# The number of packing groups when the build does not fix it, from the number
# of documents alone (never the workers', so that the shards are the same on
# any runner): one group per MIN_DOCS_PER_PACK_GROUP documents up to
# PARALLEL_PACK_GROUPS groups, so that a build of a few thousand documents
# already packs on every core; past that, groups grow, up to
# DOCS_PER_PACK_GROUP documents, the most one worker holds the plan of
# (metadata only, ~100 bytes a document). Each group ends with its own partly
# filled sequences: about one sequence per group, 0.2 % of the tokens of
# 1,000 C4 documents at seq_len 2048.
MIN_DOCS_PER_PACK_GROUP = 1_000
PARALLEL_PACK_GROUPS = 64
DOCS_PER_PACK_GROUP = 100_000


@dataclasses.dataclass(frozen=True)
class GroupPlan:
    """One packing group's plan: its sequences (each a list of pieces in slot
    order), how many documents it packs and the drops of the empty ones."""

    sequences: Iterator[list[PieceRef]]
    kept: int
    dropped: tuple[Drop, ...]


def plan_group(
    plans: Iterable[DocumentPlan],
    seq_len: int,
    packed: bool = True,
    buffer_size: int = DEFAULT_BUFFER_SIZE,
    max_open: int = DEFAULT_MAX_OPEN,
) -> GroupPlan:
    """Plan one packing group: documents in key order (whatever order they
    came in), empty ones dropped, their pieces packed by :func:`pack_plan`.

    >>> plans = [DocumentPlan("b#2", (PieceRef("b#2", 0, 1, 0, 5),)),
    ...          DocumentPlan("e#0", (PieceRef("e#0", 0, 1, 0, 0),)),
    ...          DocumentPlan("a#1", (PieceRef("a#1", 0, 1, 0, 4),))]
    >>> plan = plan_group(plans, seq_len=8)
    >>> [[ref.key for ref in sequence] for sequence in plan.sequences], plan.kept
    ([['b#2'], ['a#1']], 2)
    >>> [(drop.reason, drop.record_id) for drop in plan.dropped]
    [('empty_document', 'e')]
    """
    ordered = sorted(plans, key=lambda plan: plan.key)
    kept = [plan for plan in ordered if not plan.empty]
    dropped = tuple(Drop(EMPTY_DOCUMENT, plan.record_id) for plan in ordered if plan.empty)
    refs = (ref for plan in kept for ref in plan.pieces)
    return GroupPlan(pack_plan(refs, seq_len, packed, buffer_size, max_open), len(kept), dropped)


def pack_group_count(documents: int, pack_groups: int | None = None) -> int:
    """How many independent packing groups a build of ``documents`` uses:
    ``pack_groups`` if set, else one per 1,000 documents, at least 64 groups
    from 64,000 documents on and at most 100,000 documents a group. Either way
    it depends only on the input, never on the workers.

    >>> [pack_group_count(n) for n in (0, 5, 1_000, 1_001, 20_000)]
    [1, 1, 1, 2, 20]
    >>> [pack_group_count(n) for n in (64_000, 200_000, 6_400_000, 6_400_001)]
    [64, 64, 64, 65]
    >>> pack_group_count(10, 4)
    4
    """
    if pack_groups is not None:
        return pack_groups
    small = min(-(-documents // MIN_DOCS_PER_PACK_GROUP), PARALLEL_PACK_GROUPS)
    return max(1, small, -(-documents // DOCS_PER_PACK_GROUP))


def group_of(key: str, documents: int, pack_groups: int | None = None) -> int:
    """The packing group of the document ``key`` in a build of ``documents``:
    a stable hash of the key, so the same on every run and every worker."""
    return stable_hash(key) % pack_group_count(documents, pack_groups)


def group_offsets(counts: dict[int, int]) -> dict[int, int]:
    """Global number of each group's first sequence: groups in order.

    >>> group_offsets({2: 5, 0: 3, 1: 0})
    {0: 0, 1: 3, 2: 3}
    """
    offsets, total = {}, 0
    for group in sorted(counts):
        offsets[group] = total
        total += counts[group]
    return offsets


# A text corpus's packing groups: the reader's batches, growing from 16 to 2,048
# records of one file (a small input still spreads over the workers). Each
# group ends with its own partly filled sequences: about one per group, 0.2 %
# of the tokens of 2,048 C4 documents at seq_len 2048.
TEXT_GROUP_SIZES = (16, 2_048)


def packs_where_tokenized(spec: CorpusSpec, settings: BuildSettings) -> bool:
    """Whether a build packs each batch where it tokenizes it (a text corpus:
    no image, no global selection that rebatches its records, no fixed
    ``pack_groups``, whose groups hash each tokenized document's key)."""
    return (
        not spec.images
        and settings.pack_groups is None
        and spec.top_fraction(settings) is None
        and settings.clip is None
    )


@dataclasses.dataclass(frozen=True)
class PackedGroup:
    """One packing group's sequences, as a shard writer needs them.

    ``tokens`` holds every piece's ids, sequence after sequence and in slot
    order within one; ``lengths`` each piece's length and ``entries`` its
    ``json`` entry, in that order; ``counts`` the pieces of each sequence.
    ``order`` places the group among a build's groups: a digest of its
    documents' keys, so the same on every run (two groups with one order
    hold the same documents and pack to the same sequences).
    """

    order: str
    tokens: np.ndarray
    lengths: np.ndarray
    counts: np.ndarray
    entries: tuple[dict[str, Any], ...]
    kept: int
    dropped: tuple[Drop, ...]

    @property
    def sequences(self) -> int:
        return int(self.counts.shape[0])


def pack_group(
    docs: Sequence[TokenizedDocument],
    seq_len: int,
    packed: bool = True,
    buffer_size: int = DEFAULT_BUFFER_SIZE,
    max_open: int = DEFAULT_MAX_OPEN,
) -> PackedGroup:
    """Plan, order and pack one group of documents held in memory: the
    sequences :func:`corpora.tokens.pack.pack` makes of the group in key order,
    empty documents dropped (:func:`plan_group`).

    >>> from corpora.tokens.tokenizer import Span, TokenizedDocument
    >>> def doc(name, n):
    ...     spans = (Span("bos", 0, 1), Span("text", 1, n - 1), Span("eos", n - 1, n))
    ...     ids = np.arange(n, dtype=np.int32)
    ...     return TokenizedDocument(name, "c", ids, spans, (), {"id": name})
    >>> group = pack_group([doc("b", 5), doc("a", 4), doc("c", 4)], seq_len=8)
    >>> group.counts.tolist(), group.lengths.tolist(), [e["id"] for e in group.entries]
    ([1, 2], [5, 4, 4], ['b', 'a', 'c'])
    >>> [s.input_ids.tolist() for s in group_sequences(group, 0, 2, seq_len=8, pad_id=0)]
    [[0, 1, 2, 3, 4, 0, 0, 0], [0, 1, 2, 3, 0, 1, 2, 3]]
    """
    plans = [plan_pieces(doc, seq_len) for doc in docs]
    by_key = {plan.key: doc for plan, doc in zip(plans, docs)}  # one key: the same bytes
    planned = plan_group(plans, seq_len, packed, buffer_size, max_open)
    slices, lengths, counts, entries = [], [], [], []
    for sequence in planned.sequences:
        counts.append(len(sequence))
        for ref in sequence:
            piece = cut_piece(by_key[ref.key], ref)
            if piece.images:
                raise PackingError(f"document {ref.key!r} has images: not a text group")
            slices.append(piece.input_ids)
            lengths.append(piece.length)
            entries.append(piece.entry)
    digest = hashlib.blake2b(digest_size=16)
    for key in sorted(plan.key for plan in plans):
        digest.update(key.encode("utf-8") + b"\n")
    return PackedGroup(
        order=digest.hexdigest(),
        tokens=np.concatenate(slices) if slices else np.zeros(0, np.int32),
        lengths=np.array(lengths, dtype=np.int32),
        counts=np.array(counts, dtype=np.int32),
        entries=tuple(entries),
        kept=planned.kept,
        dropped=planned.dropped,
    )


def group_sequences(
    group: PackedGroup, first: int, count: int, seq_len: int, pad_id: int
) -> Iterator[PackedSequence]:
    """Sequences ``first`` to ``first + count`` of ``group``, laid out as
    :func:`corpora.tokens.pack.assemble` lays them out (the same bytes), all
    of them at once in ``[count, seq_len]`` arrays whose rows they are."""
    piece_starts = np.concatenate(([0], np.cumsum(group.counts, dtype=np.int64)))
    token_starts = np.concatenate(([0], np.cumsum(group.lengths, dtype=np.int64)))
    p0, p1 = int(piece_starts[first]), int(piece_starts[first + count])
    t0, t1 = int(token_starts[p0]), int(token_starts[p1])
    index = np.int32 if t1 - t0 < 2**31 else np.int64  # a shard's tokens, as numpy's default
    lengths = group.lengths[p0:p1].astype(index)
    counts = group.counts[first : first + count].astype(index)
    starts = piece_starts[first : first + count] - p0  # every sequence holds a piece
    used = np.add.reduceat(lengths, starts, dtype=np.int64) if count else np.zeros(0, np.int64)
    filled = np.arange(seq_len)[None, :] < used[:, None]
    input_ids = np.full((count, seq_len), pad_id, dtype=np.int32)
    segment_ids = np.zeros((count, seq_len), dtype=np.int32)
    positions = np.zeros((count, seq_len), dtype=np.int32)
    input_ids[filled] = group.tokens[t0:t1]
    # each piece's slot in its sequence (1, 2, …) and each token's place in its piece
    pieces = np.arange(1, p1 - p0 + 1, dtype=index) - np.repeat(starts.astype(index), counts)
    segment_ids[filled] = np.repeat(pieces, lengths)
    piece_firsts = (token_starts[p0:p1] - t0).astype(index)
    positions[filled] = np.arange(t1 - t0, dtype=index) - np.repeat(piece_firsts, lengths)
    entries = group.entries
    bounds = piece_starts[first : first + count + 1].tolist()
    for row, (a, b) in enumerate(zip(bounds, bounds[1:])):
        documents = tuple(
            {**entries[p], "segment": segment} for segment, p in enumerate(range(a, b), start=1)
        )
        yield PackedSequence(input_ids[row], segment_ids[row], positions[row], (), documents)
