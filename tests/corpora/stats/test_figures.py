import json
import os
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corpora import reader
from corpora.stats import figures as stats
from corpora.stats.figures import StatsAccumulator, TokenIds, sequence_values

IDS = TokenIds(image_token_id=9, bos_id=1, eos_id=2, tokens_per_image=2)


def test_sequence_values_classifies_every_token_of_a_segment():
    values = sequence_values(
        np.array([1, 9, 9, 5, 6, 2, 1, 7, 2, 0]),
        np.array([1, 1, 1, 1, 1, 1, 2, 2, 2, 0]),
        [
            {"id": "a", "segment": 1, "images": [{"scores": {"matched_sim": 0.31}}]},
            {"id": "b", "segment": 2},
        ],
        IDS,
    )
    assert values.tokens == 10 and values.padding_tokens == 1
    a, b = values.pieces
    assert (a.id, a.text_tokens, a.image_tokens, a.special_tokens, a.images) == ("a", 2, 2, 2, 1)
    assert a.scores == (("matched_sim", 3100),)
    assert (b.id, b.text_tokens, b.image_tokens, b.special_tokens, b.images) == ("b", 1, 0, 2, 0)


def test_padding_is_segment_zero_even_when_pad_id_is_a_text_id():
    # pad_id 0 is also <unk>: a 0 inside a segment is text, a 0 in segment 0 is padding
    values = sequence_values(
        np.array([1, 0, 2, 0]), np.array([1, 1, 1, 0]), [{"id": "a", "segment": 1}], IDS
    )
    assert values.padding_tokens == 1 and values.pieces[0].text_tokens == 1


def test_image_failures_count_once_per_document_not_per_piece():
    entry = {
        "id": "a",
        "segment": 1,
        "pieces": 2,
        "meta": {"image_failures": [{"reason": "http_404"}]},
    }
    first = sequence_values(np.array([1, 5]), np.array([1, 1]), [{**entry, "piece": 0}], IDS)
    second = sequence_values(np.array([6, 2]), np.array([1, 1]), [{**entry, "piece": 1}], IDS)
    acc = StatsAccumulator().add(first).add(second)
    assert acc.image_failures == {"http_404": 1}
    assert (
        acc.documents == 1 and acc.split_documents == 1 and acc.text_tokens_per_document == {2: 1}
    )


def reference_sequence_values(input_ids, segment_ids, documents, ids) -> stats.SequenceValues:
    """sequence_values as it was before issue 17: full-length masks per segment."""
    input_ids = np.asarray(input_ids)
    segment_ids = np.asarray(segment_ids)
    specials = [i for i in (ids.bos_id, ids.eos_id) if i >= 0]
    pieces = []
    for entry in sorted(documents, key=lambda d: d["segment"]):
        in_segment = segment_ids == entry["segment"]
        image = in_segment & (input_ids == ids.image_token_id)
        special = in_segment & np.isin(input_ids, specials) & ~image
        image_tokens = int(image.sum())
        special_tokens = int(special.sum())
        piece = int(entry.get("piece", 0))
        scores = []
        for img in entry.get("images", []):
            for name, value in sorted((img.get("scores") or {}).items()):
                if value is not None:
                    scores.append((name, stats.quantise(value)))
        failures = ()
        if piece == 0:
            failures = tuple(
                f.get("reason", "unknown")
                for f in (entry.get("meta") or {}).get("image_failures", [])
            )
        # a slot is followed by text where the first token after its run is
        # text of the same segment; a segment ends in an image where a slot is
        # the last token before another segment (or the end)
        text = (segment_ids > 0) & (input_ids != ids.image_token_id) & ~np.isin(input_ids, specials)
        size, with_text, ends_in_image = len(input_ids), 0, False
        for position in np.flatnonzero(image):
            after = position + 1
            while after < size and input_ids[after] == ids.image_token_id:
                after += 1
            with_text += int(after < size and in_segment[after] and text[after])
            ends_in_image |= position + 1 == size or not in_segment[position + 1]
        pieces.append(
            stats.SegmentValues(
                id=str(entry["id"]),
                piece=piece,
                pieces=int(entry.get("pieces", 1)),
                text_tokens=int(in_segment.sum()) - image_tokens - special_tokens,
                image_tokens=image_tokens,
                special_tokens=special_tokens,
                images=image_tokens // ids.tokens_per_image,
                scores=tuple(scores),
                image_failures=failures,
                images_with_text=with_text // ids.tokens_per_image,
                ends_in_image=bool(ends_in_image),
                dropped_pieces=int((entry.get("dropped") or {}).get("pieces", 0)),
                dropped_tokens=int((entry.get("dropped") or {}).get("tokens", 0)),
            )
        )
    return stats.SequenceValues(
        tokens=int(input_ids.shape[0]),
        padding_tokens=int((segment_ids == 0).sum()),
        pieces=tuple(pieces),
    )


TOKEN_IDS = st.builds(
    TokenIds,
    image_token_id=st.sampled_from([9, 1]),  # 1: image slots that share BOS's id
    bos_id=st.sampled_from([1, -1]),  # -1: a tokenizer without BOS
    eos_id=st.sampled_from([2, -1]),
    tokens_per_image=st.sampled_from([1, 2, 3]),
)
TOKENS = st.sampled_from([0, 1, 2, 5, 6, 9])  # 0 is pad_id, also a text id inside a segment


@st.composite
def packed_sequences(draw):
    """A sequence of segments (BOS, image slot runs, text, EOS), then padding;
    sometimes shuffled, so a segment is not one contiguous run."""
    input_ids, segment_ids, documents = [], [], []
    for segment in range(1, draw(st.integers(0, 5)) + 1):
        tokens = [1] * draw(st.booleans())
        images = []
        for _ in range(draw(st.integers(0, 3))):
            tokens += [9] * draw(st.integers(1, 4)) + draw(st.lists(TOKENS, max_size=6))
            images.append({"scores": {"matched_sim": draw(st.floats(0, 1))}})
        tokens += draw(st.lists(TOKENS, max_size=8)) + [2] * draw(st.booleans())
        input_ids += tokens
        segment_ids += [segment] * len(tokens)
        documents.append(
            {
                "id": f"d{segment}",
                "segment": segment,
                "piece": draw(st.integers(0, 1)),
                "pieces": 2,
                "images": images,
                "meta": {"image_failures": [{"reason": "http_404"}] * draw(st.integers(0, 2))},
            }
        )
    padding = draw(st.integers(0, 6))
    input_ids += draw(st.lists(TOKENS, min_size=padding, max_size=padding))
    segment_ids += [0] * padding
    documents = draw(st.permutations(documents))
    if draw(st.booleans()):  # a document whose segment holds no token
        documents.append({"id": "none", "segment": 7})
    order = np.arange(len(input_ids))
    if draw(st.booleans()):
        order = np.array(draw(st.permutations(list(order))), dtype=int)
    dtype = draw(st.sampled_from([np.int32, np.int64]))
    return (
        np.array(input_ids, dtype)[order],
        np.array(segment_ids, dtype)[order],
        documents,
    )


@settings(max_examples=300, deadline=None)
@given(packed_sequences(), TOKEN_IDS)
def test_sequence_values_equal_the_per_segment_reference(sequence, ids):
    input_ids, segment_ids, documents = sequence
    assert sequence_values(input_ids, segment_ids, documents, ids) == reference_sequence_values(
        input_ids, segment_ids, documents, ids
    )


def test_sequence_values_refuses_arrays_of_different_lengths():
    with pytest.raises(ValueError, match="not one sequence"):
        sequence_values(np.array([1, 5, 2]), np.array([1, 1]), [{"id": "a", "segment": 1}], IDS)


def split_corpus() -> list[stats.SequenceValues]:
    """Sequences of six documents; document "long" is split over three."""
    rng = random.Random(7)
    sequences = []
    for s in range(6):
        documents, ids, segs = [], [], []
        for k in range(1, 3):
            n = rng.randint(1, 5)
            ids += [1] + [9, 9] * (k % 2) + [5] * n + [2]
            segs += [k] * (2 + 2 * (k % 2) + n)
            documents.append(
                {
                    "id": f"d{s}-{k}",
                    "segment": k,
                    "images": [{"scores": {"matched_sim": rng.random()}}] * (k % 2),
                }
            )
        if s < 3:
            ids += [5, 5, 9, 9]
            segs += [3] * 4
            documents.append({"id": "long", "segment": 3, "piece": s, "pieces": 3, "images": [{}]})
        ids += [0] * 3
        segs += [0] * 3
        sequences.append(sequence_values(np.array(ids), np.array(segs), documents, IDS))
    return sequences


def test_merging_in_any_order_gives_the_same_statistics():
    sequences = split_corpus()
    manifest = {"corpus": "mmc4-pairs", "seq_len": 0, "tokens_per_image": 2}
    whole = StatsAccumulator()
    for values in sequences:
        whole.add(values)
    expected = stats.finalize(whole, manifest)
    assert expected["totals"]["documents"] == 13 and expected["packing"]["split_documents"] == 1
    assert expected["packing"]["incomplete_documents"] == 0
    for seed in range(5):
        order = sequences[:]
        random.Random(seed).shuffle(order)
        parts = [StatsAccumulator() for _ in range(3)]
        for i, values in enumerate(order):
            parts[i % 3].add(values)
        merged = parts[seed % 3]
        for i, part in enumerate(parts):
            if part is not merged:
                merged.merge(part)
        assert stats.finalize(merged, manifest) == expected


def test_a_split_document_missing_pieces_is_counted_with_the_pieces_seen():
    acc = StatsAccumulator()
    for values in split_corpus()[:2]:
        acc.add(values)
    result = stats.finalize(acc, {"corpus": "x"}, whole_build=False)
    assert result["packing"]["incomplete_documents"] == 1
    assert (
        result["funnel"] is None and result["image_fetch"] is None and result["scope"] == "shards"
    )


def test_funnel_and_fetch_sections_from_the_manifest():
    acc = StatsAccumulator()
    acc.images, acc.image_failures["timeout"] = 6, 1
    manifest = {
        "corpus": "mmc4",
        "funnel": {
            "unit": "document",
            "input": 10,
            "kept": 5,
            "dropped": {"bad_json": 2, "http_404": 2, "not_image": 1},
        },
        "images_removed": {"over_max_images": 1, "clip_similarity_below_min": 3},
    }
    result = stats.finalize(acc, manifest)
    assert result["funnel"] == {
        "unit": "document",
        "input": 10,
        "kept": 5,
        "kept_share": 0.5,
        "dropped": [
            {"reason": "bad_json", "count": 2, "share": 0.2},
            {"reason": "http_404", "count": 2, "share": 0.2},
            {"reason": "not_image", "count": 1, "share": 0.1},
        ],
        "images_removed": [  # from kept documents (issue 32, finding 7)
            {"reason": "clip_similarity_below_min", "count": 3},
            {"reason": "over_max_images", "count": 1},
        ],
    }
    fetch = result["image_fetch"]
    assert (fetch["attempted"], fetch["fetched"], fetch["failed"], fetch["success_rate"]) == (
        10,
        6,
        4,
        0.6,
    )
    assert [f["reason"] for f in fetch["failures"]] == ["http_404", "not_image", "timeout"]
    assert result["reference"]["values"] == {
        "text_tokens_per_image": 122.5,
        "images_per_document": 4.0,
    }


def test_vila_reference_only_for_coyo_and_mmc4():
    for corpus, expected in (
        ("coyo", {"text_tokens_per_image": 22.7}),
        ("mmc4-pairs", None),
        ("c4", None),
    ):
        reference = stats.finalize(StatsAccumulator(), {"corpus": corpus})["reference"]
        assert (reference and reference["values"]) == expected


def test_a_filter_drop_named_like_a_fetch_reason_is_no_failed_fetch():
    # coyo drops a row whose declared size is too small before any download, and
    # the fetch stage drops one whose image turns out too small: the same name
    funnel = {
        "unit": "pair",
        "input": 10,
        "kept": 5,
        "dropped": {"image_too_small": 3, "http_404": 1, "nsfw_above_max": 1},
    }
    images = {"input": 7, "ok": 5, "failed": {"image_too_small": 1, "http_404": 1}}
    manifest = {"corpus": "coyo", "funnel": funnel, "images": images}
    section = stats.finalize(StatsAccumulator(), manifest)["image_fetch"]
    assert section["failed"] == 2
    assert {f["reason"]: f["count"] for f in section["failures"]} == {
        "image_too_small": 1,
        "http_404": 1,
    }
    # a document corpus keeps a document whose image failed: its failures are in
    # the documents' meta, not in the funnel
    documents = {**manifest, "corpus": "mmc4"}
    assert stats.finalize(StatsAccumulator(), documents)["image_fetch"]["failed"] == 0


def test_every_fetch_reason_is_counted_as_a_failed_fetch():
    from corpora.fetch.settings import REASONS, is_fetch_reason

    reasons = [*REASONS, "http_404", "http_410"]
    for reason in reasons:
        manifest = {"funnel": {"unit": "pair", "input": 2, "kept": 1, "dropped": {reason: 1}}}
        section = stats.finalize(StatsAccumulator(), manifest)["image_fetch"]
        assert (section["failed"], section["failures"][0]["reason"]) == (1, reason), reason
    for reason in ("bad_json", "empty_text", "clip_similarity_below_min", "http_x"):
        assert not is_fetch_reason(reason)
        manifest = {"funnel": {"unit": "pair", "input": 2, "kept": 1, "dropped": {reason: 1}}}
        assert stats.finalize(StatsAccumulator(), manifest)["image_fetch"]["failed"] == 0


def _write(directory: str, name: str, text: str) -> str:
    path = os.path.join(directory, name)
    with open(path, "w") as handle:
        handle.write(text)
    return path


@pytest.mark.parametrize("content, message", [(b"garbage\n", "truncated header"), (b"", "")])
def test_an_unreadable_shard_is_a_build_input_error(tmp_path, content, message):
    manifest = {
        "corpus": "x",
        "seq_len": 16,
        "image_token_id": 9,
        "bos_id": 1,
        "eos_id": 2,
        "pad_id": 0,
        "tokens_per_image": 2,
        "shards": [{"path": "x-000000.tar", "samples": 1, "bytes": 1, "sha256": "0" * 64}],
    }
    _write(str(tmp_path), "manifest.json", json.dumps(manifest))
    (tmp_path / "x-000000.tar").write_bytes(content)
    with pytest.raises(reader.BuildInputError, match="shard does not match the manifest: .*bytes"):
        stats.stats_from_shards(str(tmp_path))  # checked against the manifest first
    with pytest.raises(reader.BuildInputError, match=f"unreadable shard .*x-000000.tar: {message}"):
        stats.stats_from_shards(str(tmp_path), verify=False)


def test_images_kept_with_their_text_and_short_pieces_dropped_are_counted():
    ids = TokenIds(image_token_id=9, bos_id=1, eos_id=2, tokens_per_image=2)
    # segment 1: [bos, img, 5, img] ends in a slot (its text is in the next piece);
    # segment 2: [6, eos], the next piece; segment 3: [bos, img, img, 7, eos]
    input_ids = np.array([1, 9, 9, 5, 9, 9, 6, 2, 1, 9, 9, 9, 9, 7, 2, 0])
    segment_ids = np.array([1, 1, 1, 1, 1, 1, 2, 2, 3, 3, 3, 3, 3, 3, 3, 0])
    documents = [
        {"id": "a", "segment": 1, "piece": 0, "pieces": 2, "dropped": {"pieces": 1, "tokens": 3}},
        {"id": "a", "segment": 2, "piece": 1, "pieces": 2},
        {"id": "b", "segment": 3},
    ]
    values = stats.sequence_values(input_ids, segment_ids, documents, ids)
    assert [(p.images_with_text, p.ends_in_image) for p in values.pieces] == [
        (1, True),
        (0, False),
        (2, False),
    ]
    packing = stats.finalize(StatsAccumulator().add(values), {"corpus": "mmc4"})["packing"]
    assert packing["images_with_text_fraction"] == 3 / 4
    assert packing["pieces_ending_in_image"] == 1
    assert packing["short_pieces_dropped"] == {"pieces": 1, "tokens": 3}


def test_a_packed_group_s_values_are_those_of_its_laid_out_sequences():
    from corpora.tokens import pack_groups
    from tests.corpora.tokens.test_pack import BOS, EOS, IMAGE, make_doc

    ids = TokenIds(image_token_id=IMAGE, bos_id=BOS, eos_id=EOS, tokens_per_image=3)
    rng = np.random.default_rng(11)
    docs = [
        make_doc(f"d{i}", [("text", int(rng.integers(1, 40))) for _ in range(2)]) for i in range(40)
    ]
    group = pack_groups.pack_group(docs, seq_len=32)
    sequences = list(pack_groups.group_sequences(group, 0, group.sequences, 32, pad_id=0))
    expected = [sequence_values(s.input_ids, s.segment_ids, s.documents, ids) for s in sequences]
    args = (group.tokens, group.lengths, group.counts, group.entries, 32)
    assert list(stats.packed_values(*args, ids)) == expected
    # an id that is also the image token (a reserved piece): counted from the laid-out sequence
    tokens = group.tokens.copy()
    tokens[5:8] = IMAGE
    args = (tokens, group.lengths, group.counts, group.entries, 32)
    seq = [s.input_ids.copy() for s in sequences]
    seq[0][5:8] = IMAGE
    expected = [sequence_values(i, s.segment_ids, s.documents, ids) for i, s in zip(seq, sequences)]
    assert list(stats.packed_values(*args, ids)) == expected


@pytest.mark.parametrize("seed", range(2))
def test_a_text_group_s_statistics_are_those_of_its_values_one_by_one(seed):
    # a text build counts each packing group at once (add_group): the same
    # counts as adding its sequences' values, with split documents, short
    # pieces dropped, image failures in a document's meta and, once, a text id
    # that is also the image token (then the group is counted sequence by sequence)
    from corpora.tokens import pack_groups
    from tests.corpora.tokens.test_pack import BOS, EOS, IMAGE, make_doc

    ids = TokenIds(image_token_id=IMAGE, bos_id=BOS, eos_id=EOS, tokens_per_image=3)
    rng = np.random.default_rng(seed)
    docs = [
        make_doc(f"d{i}", [("text", int(rng.integers(1, 60))) for _ in range(3)]) for i in range(60)
    ]
    group = pack_groups.pack_group(docs, seq_len=32)
    entries = [dict(entry) for entry in group.entries]
    entries[3]["meta"] = {"image_failures": [{"reason": "http_404"}]}
    entries[7]["dropped"] = {"reason": "short_piece", "pieces": 1, "tokens": 2}
    tokens = group.tokens.copy()
    if seed == 1:
        tokens[5:8] = IMAGE
    assert any(entry.get("pieces", 1) > 1 for entry in entries)
    args = (tokens, group.lengths, group.counts, entries, 32, ids)
    one_by_one = StatsAccumulator()
    for values in stats.packed_values(*args):
        one_by_one.add(values)
    assert vars(StatsAccumulator().add_group(*args)) == vars(one_by_one)
