"""A build's packing planned per group: key order, the empty-document rule,
stable groups, and the same sequences as the in-memory packer."""

from __future__ import annotations

import numpy as np
import pytest
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


def _random_docs(seed: int, count: int) -> list[TokenizedDocument]:
    rng = np.random.default_rng(seed)
    docs = []
    for i in range(count):
        chunks = [("text", int(rng.integers(1, 30))) for _ in range(int(rng.integers(1, 4)))]
        docs.append(make_doc(f"doc{i:03d}", chunks))
    return docs


def test_a_packed_group_lays_out_the_sequences_the_core_packer_makes():
    docs = _random_docs(5, 60)  # some longer than seq_len: split into pieces
    empty = TokenizedDocument("E", "c", np.zeros(0, np.int32), (), (), {"id": "E"})
    group = pack_groups.pack_group(docs[::-1] + [empty], seq_len=32)
    assert (group.kept, [(d.reason, d.record_id) for d in group.dropped]) == (
        60,
        [("empty_document", "E")],
    )
    keyed = sorted(docs, key=pack.doc_key)
    expected = list(pack.pack(keyed, seq_len=32, pad_id=7))
    assert group.sequences == len(expected) and any(len(s.documents) > 1 for s in expected)
    assert any(d["split"] for s in expected for d in s.documents)
    for first, count in [(0, group.sequences), (0, 1), (3, 5), (group.sequences - 1, 1)]:
        got = list(pack_groups.group_sequences(group, first, count, seq_len=32, pad_id=7))
        for a, b in zip(got, expected[first : first + count], strict=True):
            for name in ("input_ids", "segment_ids", "positions"):
                np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
                assert getattr(a, name).dtype == np.int32
            assert (a.documents, a.images) == (b.documents, b.images)


def test_a_group_s_order_depends_on_its_documents_only():
    docs = _random_docs(6, 20)
    a = pack_groups.pack_group(docs, seq_len=32)
    assert pack_groups.pack_group(docs[::-1], seq_len=32).order == a.order
    assert pack_groups.pack_group(docs[1:], seq_len=32).order != a.order
    unpacked = pack_groups.pack_group(docs, seq_len=32, packed=False)
    assert set(unpacked.counts.tolist()) == {1}


def test_a_group_with_images_is_refused():
    with pytest.raises(pack.PackingError, match="not a text group"):
        pack_groups.pack_group([make_doc("img", [("image", 0), ("text", 3)])], seq_len=32)


def test_text_groups_of_c4_like_documents_fill_99_percent_of_the_tokens():
    """A text build's packing groups are its reader's batches (16, 32, … up to
    2,048 documents): each ends in about one partly filled sequence, and C4's
    lengths (log-normal around 260 tokens) still fill at least 99 % of 2048."""
    from corpora.tokens.tokenizer import Span

    rng = np.random.default_rng(29)
    lengths = np.maximum(8, rng.lognormal(np.log(260), 0.95, 20_000)).astype(int).tolist()
    docs = []
    for i, length in enumerate(lengths):
        spans = (Span("bos", 0, 1), Span("text", 1, length - 1), Span("eos", length - 1, length))
        ids = np.full(length, 7, np.int32)
        docs.append(TokenizedDocument(f"d{i}", "c4", ids, spans, (), {"id": f"d{i}"}))
    sizes, size = [], pack_groups.TEXT_GROUP_SIZES[0]
    while sum(sizes) < len(docs):
        sizes.append(size)
        size = min(2 * size, pack_groups.TEXT_GROUP_SIZES[1])
    used = total = start = 0
    for size in sizes:
        group = pack_groups.pack_group(docs[start : start + size], seq_len=2048)
        used += int(group.lengths.sum())
        total += group.sequences * 2048
        start += size
    assert used == sum(lengths)  # nothing lost: every document whole or in pieces
    assert used / total >= 0.99
