"""A build's packing planned per group: key order, the empty-document rule,
stable groups, and the same sequences as the in-memory packer."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from corpora.tokens import pack, pack_groups
from corpora.tokens.tokenizer import TokenizedDocument
from tests.corpora.tokens.test_pack import make_doc, text_doc


def test_plan_group_orders_documents_by_key_and_drops_empty_ones():
    docs = [text_doc("C", [1, 9, 9, 2]), text_doc("A", [1, 5, 6, 2]), text_doc("B", [1, 7, 2])]
    empty = TokenizedDocument("E", "c", np.zeros(0, np.int32), (), (), {"id": "E"})
    plans = [pack.plan_pieces(d, 8) for d in docs + [empty]]
    for ordering in (plans, plans[::-1]):
        planned = pack_groups.plan_group(ordering, seq_len=8)
        sequences = [[ref.key.split("#")[0] for ref in s] for s in planned.sequences]
        assert sequences == [["A", "C"], ["B"]]  # A (4) opens, B (3) opens, C (4) fills A's
        assert planned.kept == 3
        assert [(d.reason, d.record_id) for d in planned.dropped] == [("empty_document", "E")]


def test_plan_group_unpacked_gives_one_piece_per_sequence_in_key_order():
    plans = [pack.plan_pieces(text_doc(name, [1, 5, 2]), 8) for name in "BA"]
    planned = pack_groups.plan_group(plans, seq_len=8, packed=False)
    assert [[ref.key[0] for ref in s] for s in planned.sequences] == [["A"], ["B"]]


def test_pack_group_count_depends_on_documents_only():
    assert pack_groups.pack_group_count(250_000) == 64
    assert pack_groups.pack_group_count(25_000_000) == 250
    assert pack_groups.pack_group_count(250_000, 7) == 7


def test_a_few_thousand_documents_pack_in_parallel_and_a_sample_in_one_group():
    # a build of one 20,000-document file packs on up to 20 workers ...
    assert pack_groups.pack_group_count(20_000) == 20
    # ... a small input (the bundled sample, the byte-identity fixtures) stays one group
    assert pack_groups.pack_group_count(pack_groups.MIN_DOCS_PER_PACK_GROUP) == 1


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 10**9), st.integers(0, 10**9))
def test_more_documents_never_make_fewer_groups_nor_groups_too_large(a, b):
    low, high = sorted((a, b))
    assert pack_groups.pack_group_count(low) <= pack_groups.pack_group_count(high)
    groups = pack_groups.pack_group_count(high)
    assert -(-high // groups) <= pack_groups.DOCS_PER_PACK_GROUP


def test_a_document_s_group_depends_on_its_key_and_the_build_only():
    keys = [pack.doc_key(text_doc(f"doc{i}", [1, i, 2])) for i in range(500)]
    groups = [pack_groups.group_of(key, 3_000) for key in keys]
    assert groups == [pack_groups.group_of(key, 3_000) for key in keys]
    assert set(groups) == {0, 1, 2}
    assert {pack_groups.group_of(key, 10) for key in keys} == {0}


chunk = st.one_of(
    st.tuples(st.just("text"), st.integers(1, 30)), st.tuples(st.just("image"), st.just(0))
)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(chunk, max_size=5), min_size=1, max_size=20), st.integers(8, 40))
def test_one_group_planned_cut_and_assembled_is_the_in_memory_packer(chunk_lists, seq_len):
    """The steps a build runs, composed here, equal pack() on documents in key order."""
    docs = [make_doc(f"doc{i:02d}", chunks) for i, chunks in enumerate(chunk_lists)]
    by_key = {pack.doc_key(doc): doc for doc in docs}
    planned = pack_groups.plan_group([pack.plan_pieces(d, seq_len) for d in docs[::-1]], seq_len)
    placed = [
        (number, slot, pack.cut_piece(by_key[ref.key], ref))
        for number, sequence in enumerate(planned.sequences)
        for slot, ref in enumerate(sequence)
    ]
    built = [s for _, s in pack.assemble_sequences(placed[::-1], seq_len, 0)]
    expected = list(pack.pack(sorted(docs, key=pack.doc_key), seq_len, 0))
    assert len(built) == len(expected)
    for got, want in zip(built, expected):
        for name in ("input_ids", "segment_ids", "positions"):
            np.testing.assert_array_equal(getattr(got, name), getattr(want, name))
        assert got.images == want.images and got.documents == want.documents
