import json

from corpora import layouts
from corpora.record import Drop, ImageChunk, TextChunk
from corpora.sources import mmc4
from tests import fixtures


def parse(obj) -> mmc4.Mmc4Document:
    return mmc4.parse_line(json.dumps(obj).encode(), "docs_shard_0_v2.jsonl", 1)


def render(doc):
    return [c.text if isinstance(c, TextChunk) else f"<{c.meta['image_index']}>" for c in doc.chunks]


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
        parsed = mmc4.parse_line(line if isinstance(line, bytes) else line.encode(), "docs.jsonl", 1)
        result = parsed if isinstance(parsed, Drop) else layouts.mmc4_document(parsed)
        out.append(result.reason if isinstance(result, Drop) else "kept")
    return out


def test_bad_mmc4_documents_each_have_their_own_reason():
    assert reasons(fixtures.mmc4_lines()) == [
        "kept", "kept", "kept", "duplicate_matched_text_index", "more_images_than_sentences",
        "empty_text_list", "no_images", "matched_text_index_out_of_range", "bad_json", "not_utf8",
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
