"""The objectives' features: the docstring arrays exactly, and properties on
random packed samples (no label crosses a document, no image slot is a label,
every prefix holds its document's image slots, every array keeps its length)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainer import features
from trainer.features import IGNORE

IMAGE, PAD, BOS, EOS = 1000, 0, 1, 2
# The docstring example: A = [bos, image x 3, 17, 18, eos], B = [bos, 25, 26, 27, eos].
IDS = np.array([1, 1000, 1000, 1000, 17, 18, 2, 1, 25, 26, 27, 2, 0, 0, 0, 0])
SEG = np.array([1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 0, 0, 0, 0])


def test_vila_docstring_arrays():
    out = features.vila_features(IDS, SEG, image_token_id=IMAGE)
    assert out["labels"].tolist() == [-100, -100, -100, 17, 18, 2, -100, 25, 26, 27, 2] + [-100] * 5
    assert out["position_ids"].tolist() == [0, 1, 2, 3, 4, 5, 6, 0, 1, 2, 3, 4, 0, 0, 0, 0]
    assert out["labels"].dtype == out["position_ids"].dtype == np.int64


def test_prefixlm_docstring_arrays():
    out = features.prefixlm_features(IDS, SEG, IMAGE, PAD, prefix_lengths=[5, 2])
    z = [0] * 9
    assert out["encoder_input_ids"].tolist() == [1, 1000, 1000, 1000, 17, 1, 25] + z
    assert out["encoder_segment_ids"].tolist() == [1, 1, 1, 1, 1, 2, 2] + z
    assert out["encoder_positions"].tolist() == [0, 1, 2, 3, 4, 0, 1] + z
    z = [0] * 11
    assert out["decoder_input_ids"].tolist() == [0, 18, 0, 26, 27] + z
    assert out["decoder_target_ids"].tolist() == [18, 2, 26, 27, 2] + z
    assert out["decoder_segment_ids"].tolist() == [1, 1, 2, 2, 2] + z
    assert out["decoder_positions"].tolist() == [0, 1, 0, 1, 2] + z
    assert out["decoder_loss_weights"].tolist() == [1.0] * 5 + [0.0] * 11
    assert out["decoder_loss_weights"].dtype == np.float32
    assert all(out[k].dtype == np.int64 for k in out if k != "decoder_loss_weights")
    assert features.prefix_bounds(IDS, SEG, IMAGE) == [(4, 6), (1, 4)]


def test_masks_of_the_example():
    causal = features.document_causal_mask(SEG)
    assert causal.shape == (16, 16) and causal.dtype == bool
    assert causal[6, :7].all() and not causal[6, 7:].any()  # A's last token sees A only
    assert causal[7].tolist() == [False] * 7 + [True] + [False] * 8  # B's first sees itself
    assert not causal[12:].any() and not causal[:, 12:].any()  # padding
    cross = features.document_mask(np.array([1, 1, 2, 2, 2, 0]), np.array([1, 1, 1, 1, 1, 2, 2, 0]))
    assert cross.astype(int).tolist() == [
        [1, 1, 1, 1, 1, 0, 0, 0],
        [1, 1, 1, 1, 1, 0, 0, 0],
        [0, 0, 0, 0, 0, 1, 1, 0],
        [0, 0, 0, 0, 0, 1, 1, 0],
        [0, 0, 0, 0, 0, 1, 1, 0],
        [0, 0, 0, 0, 0, 0, 0, 0],
    ]


def test_prefix_lengths_are_uniform_over_their_bounds_and_seeded():
    rng = np.random.default_rng(0)
    draws = np.array([features.sample_prefix_lengths(IDS, SEG, IMAGE, rng) for _ in range(6000)])
    again = np.random.default_rng(0)
    assert features.sample_prefix_lengths(IDS, SEG, IMAGE, again) == draws[0].tolist()
    for column, (low, high) in zip(draws.T, [(4, 6), (1, 4)]):
        values, counts = np.unique(column, return_counts=True)
        assert values.tolist() == list(range(low, high + 1))
        expected = len(column) / len(values)
        assert np.all(np.abs(counts - expected) < 0.08 * expected), counts


def test_text_only_and_short_documents():
    ids = np.array([1, 7, 2, 1, 0, 0])  # a 3-token document, then a 1-token piece
    seg = np.array([1, 1, 1, 2, 0, 0])
    assert features.prefix_bounds(ids, seg, None) == [(1, 2), (1, 1)]
    out = features.prefixlm_features(ids, seg, None, PAD, prefix_lengths=[1, 1])
    assert out["encoder_input_ids"].tolist() == [1, 1, 0, 0, 0, 0]
    assert out["decoder_target_ids"].tolist() == [7, 2, 0, 0, 0, 0]
    # an image run that ends its piece: everything is prefix, the decoder gets nothing of it
    ids = np.array([1, IMAGE, IMAGE, 0])
    seg = np.array([1, 1, 1, 0])
    assert features.prefix_bounds(ids, seg, IMAGE) == [(3, 3)]
    # text-only blends have no image token: labels are the next token within a document
    labels = features.vila_labels(np.array([1, 5, 2, 1, 6]), np.array([1, 1, 1, 2, 2]), None)
    assert labels.tolist() == [5, 2, -100, 6, -100]


@st.composite
def packed(draw, seq_len: int = 48):
    """A packed row: documents of bos / image runs / text / eos, back to back, padded."""
    tokens_per_image = draw(st.integers(1, 4))
    ids: list[int] = []
    seg: list[int] = []
    segment = 0
    for _ in range(draw(st.integers(0, 6))):
        parts = draw(
            st.lists(
                st.one_of(
                    st.just("image"),
                    st.lists(st.integers(3, 999), min_size=1, max_size=8),
                ),
                max_size=4,
            )
        )
        doc = [BOS] if draw(st.booleans()) else []  # a continuation piece has no BOS
        for part in parts:
            doc += [IMAGE] * tokens_per_image if part == "image" else part
        if draw(st.booleans()):
            doc.append(EOS)
        if not doc or len(ids) + len(doc) > seq_len:
            continue
        segment += 1
        ids += doc
        seg += [segment] * len(doc)
    pad = seq_len - len(ids)
    return np.array(ids + [PAD] * pad, np.int64), np.array(seg + [0] * pad, np.int64)


def _documents(ids, seg):
    return [(s, ids[a:b]) for s, a, b in features.document_runs(seg)]


@settings(max_examples=300, deadline=None)
@given(row=packed())
def test_vila_labels_stay_inside_documents_and_never_target_image_slots(row):
    ids, seg = row
    out = features.vila_features(ids, seg, IMAGE)
    labels = out["labels"]
    assert labels.shape == ids.shape and out["position_ids"].shape == ids.shape
    assert not np.any(labels == IMAGE)
    for t in range(len(ids)):
        same = t + 1 < len(ids) and seg[t] != 0 and seg[t + 1] == seg[t]
        if same and ids[t + 1] != IMAGE:
            assert labels[t] == ids[t + 1]
        else:
            assert labels[t] == IGNORE
    # position_ids restart per document and agree with the packer's positions
    for _, a, b in features.document_runs(seg):
        assert out["position_ids"][a:b].tolist() == list(range(b - a))
    assert np.all(out["position_ids"][seg == 0] == 0)


@settings(max_examples=300, deadline=None)
@given(row=packed(), seed=st.integers(0, 2**32 - 1))
def test_prefixlm_prefix_holds_every_image_slot_and_the_halves_rebuild_the_document(row, seed):
    ids, seg = row
    out = features.prefixlm_features(ids, seg, IMAGE, PAD, rng=np.random.default_rng(seed))
    assert all(array.shape == ids.shape for array in out.values())
    enc = _documents(out["encoder_input_ids"], out["encoder_segment_ids"])
    dec_runs = {s: (a, b) for s, a, b in features.document_runs(out["decoder_segment_ids"])}
    assert [s for s, _ in enc] == [s for s, _ in _documents(ids, seg)]  # every prefix is non-empty
    assert not np.any(out["decoder_target_ids"] == IMAGE)
    for (segment, doc), (_, prefix) in zip(_documents(ids, seg), enc):
        a, b = dec_runs.get(segment, (0, 0))
        rest = out["decoder_target_ids"][a:b]
        assert np.concatenate([prefix, rest]).tolist() == doc.tolist()
        assert int((prefix == IMAGE).sum()) == int((doc == IMAGE).sum())
        if not np.any(doc == IMAGE) and len(doc) > 1:
            assert 1 <= len(prefix) <= len(doc) - 1  # T5's prefix_lm range
        assert out["decoder_input_ids"][a:b].tolist() == ([PAD] + rest[:-1].tolist())[: b - a]
        assert out["decoder_positions"][a:b].tolist() == list(range(b - a))
    assert np.array_equal(out["decoder_loss_weights"] > 0, out["decoder_segment_ids"] > 0)
    assert np.all(out["encoder_input_ids"][out["encoder_segment_ids"] == 0] == PAD)


@settings(max_examples=100, deadline=None)
@given(rows=st.lists(packed(seq_len=24), min_size=1, max_size=4), seed=st.integers(0, 1000))
def test_batches_equal_their_rows_and_masks_equal_their_definition(rows, seed):
    ids = np.stack([r[0] for r in rows])
    seg = np.stack([r[1] for r in rows])
    labels = features.vila_labels(ids, seg, IMAGE)
    for i, (row_ids, row_seg) in enumerate(rows):
        assert labels[i].tolist() == features.vila_labels(row_ids, row_seg, IMAGE).tolist()
    batch = features.prefixlm_features(ids, seg, IMAGE, PAD, rng=np.random.default_rng(seed))
    rng = np.random.default_rng(seed)
    for i, (row_ids, row_seg) in enumerate(rows):
        row = features.prefixlm_features(row_ids, row_seg, IMAGE, PAD, rng=rng)
        assert all(np.array_equal(batch[k][i], row[k]) for k in row)
    causal = features.document_causal_mask(seg)
    assert causal.shape == (len(rows), 24, 24)
    q, k = np.meshgrid(np.arange(24), np.arange(24), indexing="ij")
    for i in range(len(rows)):
        s = seg[i]
        expected = (s[q] == s[k]) & (s[q] != 0) & (k <= q)
        assert np.array_equal(causal[i], expected)


def test_packed_prefixlm_docstring_arrays():
    (_, *a), (_, *b) = features.split_documents(IDS, SEG, [5, 2])
    ((_, *c),) = features.split_documents(np.array([1, IMAGE, IMAGE, IMAGE, 31, 2]), [1] * 6, [4])
    out = features.pack_prefixlm([[a, b], [c]], encoder_len=8, decoder_len=6, pad_id=PAD)
    assert out["encoder_input_ids"].tolist() == [
        [1, 1000, 1000, 1000, 17, 1, 25, 0],
        [1, 1000, 1000, 1000, 0, 0, 0, 0],
    ]
    assert out["encoder_segment_ids"].tolist() == [[1, 1, 1, 1, 1, 2, 2, 0], [1, 1, 1, 1] + [0] * 4]
    assert out["encoder_positions"].tolist() == [[0, 1, 2, 3, 4, 0, 1, 0], [0, 1, 2, 3] + [0] * 4]
    assert out["decoder_input_ids"].tolist() == [[0, 18, 0, 26, 27, 0], [0, 31, 0, 0, 0, 0]]
    assert out["decoder_target_ids"].tolist() == [[18, 2, 26, 27, 2, 0], [31, 2, 0, 0, 0, 0]]
    assert out["decoder_segment_ids"].tolist() == [[1, 1, 2, 2, 2, 0], [1, 1, 0, 0, 0, 0]]
    assert out["decoder_positions"].tolist() == [[0, 1, 0, 1, 2, 0], [0, 1, 0, 0, 0, 0]]
    assert out["decoder_loss_weights"].tolist() == [[1.0] * 5 + [0.0], [1.0] * 2 + [0.0] * 4]
    assert out["decoder_loss_weights"].dtype == np.float32
    assert all(out[k].dtype == np.int64 for k in out if k != "decoder_loss_weights")
    assert features.packable_bounds(IDS, SEG, IMAGE, 5, 3) == [(4, 5), (2, 4)]
    assert features.packable_bounds(IDS, SEG, IMAGE, 3, 3) == [None, (2, 3)]
    with pytest.raises(ValueError, match="do not fit"):  # 7 prefix tokens into 6
        features.pack_prefixlm([[a, b]], encoder_len=6, decoder_len=6, pad_id=PAD)


@settings(max_examples=200, deadline=None)
@given(
    row=packed(),
    seed=st.integers(0, 2**32 - 1),
    lengths=st.tuples(st.integers(1, 48), st.integers(1, 48)),
)
def test_a_row_packed_alone_is_the_unpacked_layout_and_packable_cuts_fit(row, seed, lengths):
    ids, seg = row
    runs = features.document_runs(seg)
    renumbered = np.zeros_like(seg)  # pack_prefixlm numbers a row's documents 1, 2, ...
    for number, (_, a, b) in enumerate(runs, 1):
        renumbered[a:b] = number
    prefixes = features.sample_prefix_lengths(ids, seg, IMAGE, np.random.default_rng(seed))
    halves = [(p, r) for _, p, r in features.split_documents(ids, seg, prefixes)]
    packed = features.pack_prefixlm([halves], len(ids), len(ids), PAD)
    unpacked = features.prefixlm_features(ids, renumbered, IMAGE, PAD, prefix_lengths=prefixes)
    assert all(np.array_equal(packed[k][0], unpacked[k]) for k in unpacked)
    encoder_len, decoder_len = lengths
    rng = np.random.default_rng(seed)
    for (_, a, b), bounds, (low, high) in zip(
        runs,
        features.packable_bounds(ids, seg, IMAGE, encoder_len, decoder_len),
        features.prefix_bounds(ids, seg, IMAGE),
    ):
        fits = [p for p in range(low, high + 1) if p <= encoder_len and b - a - p <= decoder_len]
        assert bounds == ((fits[0], fits[-1]) if fits else None)  # exactly the cuts that fit
        if bounds is not None:
            prefix = int(rng.integers(bounds[0], bounds[1] + 1))
            ((_, p, r),) = features.split_documents(ids[a:b], np.ones(b - a, int), [prefix])
            features.pack_prefixlm([[(p, r)]], encoder_len, decoder_len, PAD)  # fits
