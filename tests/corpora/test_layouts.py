import os

from corpora.layouts import mmc4_pairs, pair_id
from corpora.record import Document, Drop, ImageChunk, TextChunk
from corpora.sources.mmc4 import Mmc4Document, Mmc4Image, parse_line
from tests.helpers import UPSTREAM


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
        "d", "http://page", ("first.", "   ", "third."),
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
