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
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Iterator

from corpora.record import Drop, stable_hash
from corpora.tokens.pack import (
    DEFAULT_BUFFER_SIZE,
    DEFAULT_MAX_OPEN,
    EMPTY_DOCUMENT,
    DocumentPlan,
    PieceRef,
    pack_plan,
)

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
