import json
import os

from corpora.record import Document, Drop, ImageChunk, TextChunk
from corpora.sources.mmc4 import layouts
from corpora.sources.mmc4 import reader as mmc4
from corpora.sources.mmc4.layouts import mmc4_pairs, pair_id
from corpora.sources.mmc4.reader import Mmc4Document, Mmc4Image, parse_line
from tests import fixtures
from tests.helpers import UPSTREAM


def parse(obj) -> mmc4.Mmc4Document:
    return mmc4.parse_line(json.dumps(obj).encode(), "docs_shard_0_v2.jsonl", 1)


def render(doc):
    return [
        c.text if isinstance(c, TextChunk) else f"<{c.meta['image_index']}>" for c in doc.chunks
    ]


def test_interleaved_places_each_image_before_its_matched_sentence():
    example = fixtures.mmc4_example()
    doc = layouts.mmc4_document(parse(example))
    s = example["text_list"]
    assert render(doc) == [s[0], "<1>", s[1], "<0>", s[2]]
    assert doc.meta["sentences"] == 3 and doc.meta["images"] == 2
    assert layouts.mmc4_interleaved(doc) is doc


def test_reordered_puts_images_first_in_their_original_order():
    example = fixtures.mmc4_example()
    doc = layouts.mmc4_reordered(layouts.mmc4_document(parse(example), "mmc4-reordered"))
    assert render(doc) == ["<0>", "<1>", *example["text_list"]]


def test_document_whose_images_all_failed_is_dropped_unless_kept():
    doc = layouts.mmc4_document(parse(fixtures.mmc4_example()))
    textonly = doc.replace(chunks=tuple(doc.texts))
    for layout in (layouts.mmc4_interleaved, layouts.mmc4_reordered):
        assert layout(textonly).reason == "no_images_after_fetch"
        assert [c.kind for c in layout(textonly, keep_imageless=True).chunks] == ["text"] * 3


def reasons(lines):
    out = []
    for line in lines:
        parsed = mmc4.parse_line(
            line if isinstance(line, bytes) else line.encode(), "docs.jsonl", 1
        )
        result = parsed if isinstance(parsed, Drop) else layouts.mmc4_document(parsed)
        out.append(result.reason if isinstance(result, Drop) else "kept")
    return out


def test_bad_mmc4_documents_each_have_their_own_reason():
    assert reasons(fixtures.mmc4_lines()) == [
        "kept",
        "kept",
        "kept",
        "duplicate_matched_text_index",
        "more_images_than_sentences",
        "empty_text_list",
        "no_images",
        "matched_text_index_out_of_range",
        "bad_json",
        "not_utf8",
    ]


def test_reassign_repairs_a_corrupted_assignment():
    corrupted = json.loads(fixtures.mmc4_lines()[3])
    assert [i["matched_text_index"] for i in corrupted["image_info"]] == [0, 0]
    doc = layouts.mmc4_document(parse(corrupted), reassign=True)
    s = corrupted["text_list"]
    assert render(doc) == ["<1>", s[0], "<0>", s[1], s[2]]
    assert doc.meta["matched_sims"] == [0.3, 0.27] and doc.meta["reassigned"] is True
    assert [c.scores["matched_sim"] for c in doc.images] == [0.27, 0.3]


def test_reassign_needs_a_matrix_of_images_by_sentences():
    example = fixtures.mmc4_example()
    example["similarity_matrix"] = example["similarity_matrix"][:1]
    assert layouts.mmc4_document(parse(example), reassign=True).reason == "bad_similarity_matrix"
    example["similarity_matrix"] = [["x", 0.1, 0.2], [0.1, 0.2, 0.3]]
    assert layouts.mmc4_document(parse(example), reassign=True).reason == "bad_similarity_matrix"


def test_image_without_url_leaves_the_rest_of_the_document():
    example = fixtures.mmc4_example()
    example["image_info"][0]["raw_url"] = ""
    doc = layouts.mmc4_document(parse(example))
    assert render(doc) == [example["text_list"][0], "<1>", *example["text_list"][1:]]
    assert doc.meta["images_without_url"] == 1


def test_pairs_can_use_the_reassigned_matches():
    corrupted = parse(json.loads(fixtures.mmc4_lines()[3]))
    pairs = list(layouts.mmc4_pairs(mmc4.reassign(corrupted)))
    assert [p.chunks[1].text for p in pairs] == [corrupted.text_list[1], corrupted.text_list[0]]
    assert isinstance(pairs[0].chunks[0], ImageChunk)


def test_each_image_is_paired_with_only_its_matched_sentence():
    with open(os.path.join(UPSTREAM, "mmc4_readme_example.jsonl"), "rb") as handle:
        doc = parse_line(handle.readline().strip(), "docs.jsonl", 1)
    pairs = list(mmc4_pairs(doc))
    assert [type(p) for p in pairs] == [Document, Document]
    first, second = pairs
    assert isinstance(first.chunks[0], ImageChunk) and isinstance(first.chunks[1], TextChunk)
    assert first.chunks[0].url.endswith("index.90.jpg")
    assert first.chunks[1].text == doc.text_list[2].strip()
    assert second.chunks[0].url.endswith("index.91.jpg")
    assert second.chunks[1].text == doc.text_list[1].strip()
    assert first.id == pair_id(doc.id, 0) and second.id == pair_id(doc.id, 1)
    assert first.source_url == doc.url
    assert first.chunks[0].scores == {"matched_sim": doc.images[0].matched_sim}


def test_bad_pairs_are_dropped_one_by_one():
    doc = Mmc4Document(
        "d",
        "http://page",
        ("first.", "   ", "third."),
        (
            Mmc4Image("http://i/ok.jpg", 0, 0.3),
            Mmc4Image("http://i/range.jpg", 3, 0.3),
            Mmc4Image("http://i/negative.jpg", -1, 0.3),
            Mmc4Image("http://i/empty.jpg", 1, 0.3),
            Mmc4Image("", 2, 0.3),
            Mmc4Image("http://i/none.jpg", None, None),
        ),
    )
    results = list(mmc4_pairs(doc))
    assert isinstance(results[0], Document)
    assert [r.reason for r in results[1:]] == [
        "matched_text_index_out_of_range",
        "matched_text_index_out_of_range",
        "empty_text",
        "missing_image_url",
        "matched_text_index_out_of_range",
    ]
    assert len({r.id if isinstance(r, Document) else r.record_id for r in results}) == 6


def test_a_document_without_images_is_one_dropped_unit():
    results = list(mmc4_pairs(Mmc4Document("d", "u", ("a",), ())))
    assert len(results) == 1 and isinstance(results[0], Drop) and results[0].reason == "no_images"


def test_a_document_left_imageless_by_clip_is_dropped_with_that_reason():
    removed = {"images_removed": {"clip_similarity_below_min": 2}}
    doc = Document("d", "mmc4", (TextChunk("a."),), meta={**removed, "clip_model": "m/w.pt"})
    assert layouts.mmc4_interleaved(doc).reason == "no_images_after_clip"
    assert layouts.mmc4_reordered(doc).reason == "no_images_after_clip"
    assert layouts.mmc4_interleaved(doc, keep_imageless=True) is doc
    assert layouts.mmc4_interleaved(doc.replace(meta={})).reason == "no_images_after_fetch"
    # the metadata filter's removals (by matched_sim) do not make it CLIP's doing
    assert layouts.mmc4_interleaved(doc.replace(meta=removed)).reason == "no_images_after_fetch"
