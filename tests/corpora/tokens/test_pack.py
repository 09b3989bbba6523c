"""The packer: the docstring example, splitting rules, and properties on random documents."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corpora.record import ImageChunk
from corpora.tokens import pack
from corpora.tokens.tokenizer import Span, TokenizedDocument

BOS, EOS, IMAGE, PAD = 1, 2, 1000, 0


def text_doc(name: str, ids: list[int]) -> TokenizedDocument:
    spans = (Span("bos", 0, 1), Span("text", 1, len(ids) - 1), Span("eos", len(ids) - 1, len(ids)))
    return TokenizedDocument(name, "c", np.array(ids, np.int32), spans, (), {"id": name})


def make_doc(
    name: str, chunks: list[tuple[str, int]], tokens_per_image: int = 3
) -> TokenizedDocument:
    """A document from ("text", n) and ("image", _) chunks; text ids are unique
    per document and position so that tests can see where every token went."""
    ids, spans, images = [BOS], [Span("bos", 0, 1)], []
    base = 10_000 * (zlib.crc32(name.encode()) % 1000 + 1)
    for kind, n in chunks:
        start = len(ids)
        if kind == "image":
            ids += [IMAGE] * tokens_per_image
            spans.append(Span("image", start, len(ids), len(images)))
            images.append(
                ImageChunk(
                    f"http://x/{name}/{len(images)}.jpg", data=f"{name}:{len(images)}".encode()
                )
            )
        else:
            ids += [base + len(ids) + i for i in range(n)]
            spans.append(Span("text", start, len(ids)))
    spans.append(Span("eos", len(ids), len(ids) + 1))
    ids.append(EOS)
    provenance = {"id": name, "images": [{"url": img.url} for img in images]}
    return TokenizedDocument(
        name, "c", np.array(ids, np.int32), tuple(spans), tuple(images), provenance
    )


def test_docstring_example_exact_arrays():
    a, b, c = (
        text_doc("A", [1, 5, 6, 2]),
        text_doc("B", [1, 7, 7, 7, 2]),
        text_doc("C", [1, 9, 9, 2]),
    )
    sequences = list(pack.pack([a, b, c], seq_len=8, pad_id=0))
    assert len(sequences) == 2
    first, second = sequences
    np.testing.assert_array_equal(first.input_ids, [1, 7, 7, 7, 2, 0, 0, 0])
    np.testing.assert_array_equal(first.segment_ids, [1, 1, 1, 1, 1, 0, 0, 0])
    np.testing.assert_array_equal(first.positions, [0, 1, 2, 3, 4, 0, 0, 0])
    np.testing.assert_array_equal(second.input_ids, [1, 5, 6, 2, 1, 9, 9, 2])
    np.testing.assert_array_equal(second.segment_ids, [1, 1, 1, 1, 2, 2, 2, 2])
    np.testing.assert_array_equal(second.positions, [0, 1, 2, 3, 0, 1, 2, 3])
    assert [d["id"] for d in second.documents] == ["A", "C"]
    assert all(
        arr.dtype == np.int32
        for s in sequences
        for arr in (s.input_ids, s.segment_ids, s.positions)
    )
    # the same documents packed greedily in order take one sequence more
    assert len(list(pack.pack_greedy([a, b, c], 8, 0))) == 3


def test_long_document_splits_before_an_image_not_inside_it():
    # bos + 4 text + 3 image + 2 text + eos = 11 tokens, seq_len 6
    doc = make_doc("d", [("text", 4), ("image", 0), ("text", 2)])
    refs = pack.plan_document("d", doc.length, doc.spans, 6)
    assert [(r.start, r.end) for r in refs] == [(0, 5), (5, 11)]
    pieces = [pack.cut_piece(doc, r) for r in refs]
    assert [p.length for p in pieces] == [5, 6]
    assert pieces[0].input_ids[0] == BOS and EOS not in pieces[0].input_ids
    assert pieces[1].input_ids[-1] == EOS and BOS not in pieces[1].input_ids
    assert list(pieces[1].input_ids[:3]) == [IMAGE] * 3
    assert [img.data for img in pieces[1].images] == [b"d:0"] and pieces[0].images == ()
    assert [p.entry["piece"] for p in pieces] == [0, 1] and all(p.entry["split"] for p in pieces)
    assert (
        pieces[1].entry["images"] == [{"url": "http://x/d/0.jpg"}]
        and pieces[1].entry["image_tokens"] == 3
    )


def test_text_is_cut_mid_text_only_when_it_alone_does_not_fit():
    # a 2-token text fits in a piece of its own: the cut falls at its start
    fits = make_doc("a", [("text", 3), ("text", 2)])  # bos 3 2 eos = 7 tokens
    assert [(r.start, r.end) for r in pack.plan_document("a", fits.length, fits.spans, 5)] == [
        (0, 4),
        (4, 7),
    ]
    # a 12-token text is longer than seq_len: it is cut, filling each piece
    long = make_doc("b", [("text", 12)])  # 14 tokens
    refs = pack.plan_document("b", long.length, long.spans, 5)
    assert [(r.start, r.end) for r in refs] == [(0, 5), (5, 10), (10, 14)]


def test_image_longer_than_seq_len_is_refused():
    doc = make_doc("i", [("image", 0)], tokens_per_image=9)
    with pytest.raises(pack.PackingError, match="image takes 9 tokens"):
        pack.plan_document("i", doc.length, doc.spans, 8)


def test_unpacked_mode_writes_one_piece_per_sequence_in_input_order():
    docs = [text_doc("A", [1, 5, 2]), text_doc("B", [1, 7, 7, 7, 2])]
    sequences = list(pack.pack(docs, seq_len=8, pad_id=0, packed=False))
    assert [[d["id"] for d in s.documents] for s in sequences] == [["A"], ["B"]]
    np.testing.assert_array_equal(sequences[0].input_ids, [1, 5, 2, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(sequences[0].segment_ids, [1, 1, 1, 0, 0, 0, 0, 0])


def test_best_fit_fills_the_tightest_open_sequence():
    packer = pack.BestFitPacker(seq_len=10, buffer_size=100)
    for key, length in [("a", 6), ("b", 7), ("c", 3), ("d", 4)]:
        assert packer.add(pack.PieceRef(key, 0, 1, 0, length)) == []
    bins = packer.flush()
    # sorted: b7 a6 d4 c3 -> b opens bin 0 (room 3), a opens bin 1 (room 4),
    # d fits only bin 1 (room 4 -> 0), c fits bin 0 (room 3 -> 0)
    assert [[r.key for r in b] for b in bins] == [["b", "c"], ["a", "d"]]


def test_memory_stays_bounded_open_sequences_are_capped():
    packer = pack.BestFitPacker(seq_len=100, buffer_size=10, max_open=4)
    emitted = 0
    for i in range(1000):
        emitted += len(packer.add(pack.PieceRef(f"{i:04d}", 0, 1, 0, 55 + i % 7)))
        assert len(packer._buffer) < 10 and len(packer._bins) <= 4 + 10
    emitted += len(packer.flush())
    assert emitted == 1000  # 55..61 tokens: two never fit in 100


def test_an_empty_document_is_refused_by_name():
    empty = TokenizedDocument("blank", "c", np.zeros(0, np.int32), (), (), {"id": "blank"})
    with pytest.raises(pack.PackingError, match="document 'blank' has no tokens"):
        list(pack.pack([text_doc("A", [1, 5, 2]), empty], seq_len=8, pad_id=0))


def test_a_repeated_document_is_packed_as_often_as_it_comes():
    # one key (id and content): either copy stands for the other when the bytes are cut
    a = make_doc("A", [("text", 3), ("image", 0), ("text", 9)])
    sequences = list(pack.pack([a, a], seq_len=8, pad_id=0))
    pieces = [(d["id"], d["piece"]) for s in sequences for d in s.documents]
    assert sorted(pieces) == sorted(2 * [("A", i) for i in range(d_pieces(a, 8))])
    assert sum(len(s.images) for s in sequences) == 2


def d_pieces(doc: TokenizedDocument, seq_len: int) -> int:
    return len(pack.plan_pieces(doc, seq_len).pieces)


def test_plan_pieces_keys_a_document_by_id_and_content():
    a, b = text_doc("A", [1, 5, 2]), text_doc("A", [1, 6, 2])
    plan = pack.plan_pieces(a, 8)
    assert plan.key == pack.doc_key(a) and plan.key.startswith("A#")
    assert plan.record_id == "A" and plan.pieces == (pack.PieceRef(plan.key, 0, 1, 0, 3),)
    assert pack.doc_key(b) != plan.key and pack.doc_key(text_doc("A", [1, 5, 2])) == plan.key


def test_assemble_sequences_orders_by_number_then_slot_whatever_order_pieces_come_in():
    a, b, c = text_doc("A", [1, 5, 2]), text_doc("B", [1, 7, 7, 2]), text_doc("C", [1, 9, 2])
    piece = {d.id: pack.split_document(d, 8)[0] for d in (a, b, c)}
    placed = [(4, 1, piece["C"]), (3, 0, piece["B"]), (4, 0, piece["A"])]
    assembled = pack.assemble_sequences(placed, seq_len=8, pad_id=0)
    assert [number for number, _ in assembled] == [3, 4]
    assert [[d["id"] for d in s.documents] for _, s in assembled] == [["B"], ["A", "C"]]
    np.testing.assert_array_equal(assembled[1][1].input_ids, [1, 5, 2, 1, 9, 2, 0, 0])


chunk = st.one_of(
    st.tuples(st.just("text"), st.integers(1, 40)), st.tuples(st.just("image"), st.just(0))
)
documents = st.lists(st.lists(chunk, min_size=0, max_size=6), min_size=1, max_size=25)


@settings(max_examples=150, deadline=None)
@given(
    documents,
    st.integers(8, 48),
    st.integers(1, 5),
    st.integers(1, 8),
    st.integers(0, 3),
    st.booleans(),
)
def test_properties_on_random_documents(
    chunk_lists, seq_len, tokens_per_image, buffer_size, max_open, packed
):
    tokens_per_image = min(tokens_per_image, seq_len)
    docs = [make_doc(f"doc{i}", chunks, tokens_per_image) for i, chunks in enumerate(chunk_lists)]
    sequences = list(
        pack.pack(docs, seq_len, PAD, packed=packed, buffer_size=buffer_size, max_open=max_open)
    )

    seen_text: list[int] = []
    images: list[bytes] = []
    pieces_of: dict[str, list[int]] = {}
    for s in sequences:
        for array in (s.input_ids, s.segment_ids, s.positions):
            assert array.shape == (seq_len,) and array.dtype == np.int32
        segments = s.segment_ids
        k = int(segments.max())
        used = int((segments > 0).sum())
        # segment ids are 1..k in order, then 0 padding
        expected = np.concatenate(
            [np.full(d["tokens"], n, np.int32) for n, d in enumerate(s.documents, 1)]
            + [np.zeros(seq_len - used, np.int32)]
        )
        np.testing.assert_array_equal(segments, expected)
        assert k == len(s.documents) and (not packed or k >= 1)
        assert (s.input_ids[used:] == PAD).all() and (s.positions[used:] == 0).all()
        for n in range(1, k + 1):
            # positions restart at 0 for every segment
            np.testing.assert_array_equal(
                s.positions[segments == n], np.arange((segments == n).sum())
            )
        # image slot runs are whole: IMAGE runs inside a segment are multiples of tokens_per_image
        for n in range(1, k + 1):
            ids = s.input_ids[segments == n]
            run = 0
            for token in list(ids) + [-1]:
                if token == IMAGE:
                    run += 1
                else:
                    assert run % tokens_per_image == 0
                    run = 0
            assert int((ids == IMAGE).sum()) == tokens_per_image * len(s.documents[n - 1]["images"])
        seen_text += [int(t) for t in s.input_ids[:used] if t not in (BOS, EOS, IMAGE)]
        images += list(s.images)
        for d in s.documents:
            pieces_of.setdefault(d["id"], []).append(d["piece"])
        if not packed:
            assert len(s.documents) == 1

    # no token lost or duplicated but for pieces dropped as too short (what
    # the plans leave out); every image exactly once; every piece once
    plans = {d.id: pack.plan_document(d.id, d.length, d.spans, seq_len) for d in docs}
    kept = {d.id: np.concatenate([d.input_ids[r.start : r.end] for r in plans[d.id]]) for d in docs}
    for d in docs:
        assert len(kept[d.id]) + plans[d.id][0].dropped_tokens == d.length
    expected_text = [int(t) for ids in kept.values() for t in ids if t not in (BOS, EOS, IMAGE)]
    assert sorted(seen_text) == sorted(expected_text)
    kept_images = sum(int((ids == IMAGE).sum()) for ids in kept.values()) // tokens_per_image
    assert len(images) == kept_images and len(set(images)) == len(images)
    assert set(images) <= {img.data for d in docs for img in d.images}
    for token in (BOS, EOS):
        assert sum(int((s.input_ids == token).sum()) for s in sequences) == sum(
            int((ids == token).sum()) for ids in kept.values()
        )
    for d in docs:
        assert sorted(pieces_of[d.id]) == list(range(len(plans[d.id])))
    # a pure function of the input: packing again gives the same arrays
    again = list(
        pack.pack(docs, seq_len, PAD, packed=packed, buffer_size=buffer_size, max_open=max_open)
    )
    assert [s.input_ids.tobytes() for s in again] == [s.input_ids.tobytes() for s in sequences]


def test_shard_format_doc_example():
    """The worked example of docs/shard-format.md, exactly."""
    image = ImageChunk(
        "https://example.com/cat.jpg", data=b"jpeg", width=336, height=336, sha256="9f2c..."
    )
    a = TokenizedDocument(
        "mmc4p-3f1c",
        "mmc4-pairs",
        np.array([1, 1000, 1000, 1000, 17, 18, 2], np.int32),
        (Span("bos", 0, 1), Span("image", 1, 4, 0), Span("text", 4, 6), Span("eos", 6, 7)),
        (image,),
        {
            "id": "mmc4p-3f1c",
            "corpus": "mmc4-pairs",
            "url": "https://example.com/page",
            "images": [{"url": image.url, "sha256": "9f2c...", "width": 336, "height": 336}],
        },
    )
    b = TokenizedDocument(
        "mmc4p-8a0d",
        "mmc4-pairs",
        np.array([1, 25, 26, 27, 2], np.int32),
        (Span("bos", 0, 1), Span("text", 1, 4), Span("eos", 4, 5)),
        (),
        {"id": "mmc4p-8a0d", "corpus": "mmc4-pairs", "images": []},
    )
    (sequence,) = pack.pack([b, a], seq_len=16, pad_id=0)
    assert sequence.input_ids.tolist() == [
        1,
        1000,
        1000,
        1000,
        17,
        18,
        2,
        1,
        25,
        26,
        27,
        2,
        0,
        0,
        0,
        0,
    ]
    assert sequence.segment_ids.tolist() == [1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 0, 0, 0, 0]
    assert sequence.positions.tolist() == [0, 1, 2, 3, 4, 5, 6, 0, 1, 2, 3, 4, 0, 0, 0, 0]
    assert sequence.images == (b"jpeg",)
    assert list(sequence.documents) == [
        {
            "corpus": "mmc4-pairs",
            "id": "mmc4p-3f1c",
            "image_tokens": 3,
            "images": [
                {
                    "height": 336,
                    "sha256": "9f2c...",
                    "url": "https://example.com/cat.jpg",
                    "width": 336,
                }
            ],
            "piece": 0,
            "pieces": 1,
            "segment": 1,
            "split": False,
            "tokens": 7,
            "url": "https://example.com/page",
        },
        {
            "corpus": "mmc4-pairs",
            "id": "mmc4p-8a0d",
            "image_tokens": 0,
            "images": [],
            "piece": 0,
            "pieces": 1,
            "segment": 2,
            "split": False,
            "tokens": 5,
        },
    ]


# ── splits keep every image with its text ─────────────────────────────────────


def layout_chunks(layout: str, texts: list[int], images: int) -> list[tuple[str, int]]:
    """MMC4's three layouts of ``images`` images and sentences of ``texts`` tokens:
    interleaved (each image before a sentence, some sentences with several),
    pairs (image, sentence, image, sentence) and reordered (all images first)."""
    if layout == "reordered":
        return [("image", 0)] * images + [("text", n) for n in texts]
    if layout == "pairs":
        return [c for n in texts[:images] for c in (("image", 0), ("text", n))]
    chunks: list[tuple[str, int]] = []
    for index, n in enumerate(texts):
        chunks += [("image", 0)] * (images // len(texts) + (index < images % len(texts)))
        chunks.append(("text", n))
    return chunks


def image_runs(doc: TokenizedDocument) -> list[tuple[int, int, bool]]:
    """``(start, end, text follows)`` of each run of adjacent image spans."""
    runs: list[tuple[int, int, bool]] = []
    for index, span in enumerate(doc.spans):
        if span.kind != "image":
            continue
        follows = doc.spans[index + 1].kind == "text"
        if runs and runs[-1][1] == span.start:
            runs[-1] = (runs[-1][0], span.end, follows)
        else:
            runs.append((span.start, span.end, follows))
    return runs


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from(["interleaved", "pairs", "reordered"]),
    st.lists(st.integers(1, 120), min_size=1, max_size=8),
    st.integers(0, 8),
    st.integers(1, 24),
    st.integers(8, 160),
)
def test_a_split_never_orphans_an_image(layout, texts, images, tokens_per_image, seq_len):
    tokens_per_image = min(tokens_per_image, seq_len)
    doc = make_doc("d", layout_chunks(layout, texts, images), tokens_per_image)
    refs = pack.plan_document("d", doc.length, doc.spans, seq_len)
    shortest = pack.min_piece_tokens(seq_len)
    runs = image_runs(doc)
    if doc.length <= seq_len:
        assert [(r.start, r.end, r.count) for r in refs] == [(0, doc.length, 1)]
        return

    # every token in exactly one piece, in order, but for pieces dropped as too
    # short: their tokens are the gaps, counted on the first piece
    assert [(r.index, r.count) for r in refs] == [(i, len(refs)) for i in range(len(refs))]
    bounds = [0] + [b for r in refs for b in (r.start, r.end)] + [doc.length]
    gaps = [b - a for a, b in zip(bounds[::2], bounds[1::2])]
    assert min(gaps) >= 0 and sum(gaps) == refs[0].dropped_tokens
    assert sum(1 for g in gaps if g) <= refs[0].dropped_pieces
    assert refs[0].dropped_tokens < shortest * refs[0].dropped_pieces or not refs[0].dropped_pieces
    assert all(r.dropped == (0, 0) for r in refs[1:])
    for ref in refs:
        # at most seq_len, never shorter than the minimum
        assert shortest <= ref.length <= seq_len
        for start, end, follows in runs:
            # an image's slots are never cut
            for span in doc.spans:
                if span.kind == "image" and ref.start < span.end and span.start < ref.end:
                    assert ref.start <= span.start and span.end <= ref.end
            # a piece ends in an image slot while text follows that image only
            # where its run and one token of the text cannot share a piece
            if start < ref.end <= end and follows:
                assert end - start + 1 > seq_len, (ref, runs)
        # PrefixLM's check on every piece whose images can keep their text:
        # a token to predict after the last image slot
        slots = np.flatnonzero(doc.input_ids[ref.start : ref.end] == IMAGE)
        last_run = next(
            (r for r in runs if r[0] <= ref.start + (slots[-1] if slots.size else -1) < r[1]), None
        )
        if last_run is not None and last_run[2] and last_run[1] - last_run[0] + 1 <= seq_len:
            assert slots[-1] + 1 < ref.length
