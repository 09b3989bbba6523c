import json
import os

from corpora.record import Drop
from corpora.sources.mmc4 import reader as mmc4
from corpora.sources.mmc4.reader import Mmc4Document, parse_line
from tests.helpers import UPSTREAM


def _upstream_line() -> bytes:
    with open(os.path.join(UPSTREAM, "mmc4_readme_example.jsonl"), "rb") as handle:
        return handle.readline().rstrip(b"\n")


def test_parses_the_real_upstream_document():
    doc = parse_line(_upstream_line(), "docs_shard_0_v2.jsonl", 1)
    assert isinstance(doc, Mmc4Document)
    assert doc.url == "http://www.hfitinfo.com/hofi-48.html"
    assert len(doc.text_list) == 3
    assert [i.matched_text_index for i in doc.images] == [2, 1]
    assert doc.images[0].raw_url == "http://www.hfitinfo.com/honda_fit_pics/3/2/index.90.jpg"
    assert abs(doc.images[1].matched_sim - 0.3234919607639313) < 1e-12
    assert len(doc.similarity_matrix) == 2 and len(doc.similarity_matrix[0]) == 3


def test_id_is_stable_and_depends_on_file_line_and_url():
    a = parse_line(_upstream_line(), "shard.jsonl", 7)
    assert a.id == parse_line(_upstream_line(), "/other/dir/shard.jsonl", 7).id
    assert a.id != parse_line(_upstream_line(), "shard.jsonl", 8).id


def test_bad_lines_are_dropped_with_their_own_reasons():
    cases = {
        b"{not json": "bad_json",
        b"[1, 2]": "bad_json",
        b"\xff\xfe{}": "not_utf8",
        json.dumps({"url": "u", "image_info": []}).encode(): "missing_text_list",
        json.dumps({"url": "u", "text_list": ["a"]}).encode(): "missing_image_info",
    }
    for raw, reason in cases.items():
        result = parse_line(raw, "f.jsonl", 3)
        assert isinstance(result, Drop) and result.reason == reason, raw
        assert result.record_id == "f.jsonl:3"


# --reassign, and a similarity matrix that is not numbers never fails the reader
def test_reassign_recomputes_matches_from_the_similarity_matrix():
    doc = mmc4.Mmc4Document(
        "d",
        "http://page",
        ("a.", "b.", "c."),
        (mmc4.Mmc4Image("http://i/1.jpg", 0, 0.2), mmc4.Mmc4Image("http://i/2.jpg", 0, 0.27)),
        similarity_matrix=((0.2, 0.3, 0.1), (0.27, 0.22, 0.12)),
    )
    fixed = mmc4.reassign(doc)
    assert [(i.matched_text_index, i.matched_sim) for i in fixed.images] == [(1, 0.3), (0, 0.27)]
    assert [i.raw_url for i in fixed.images] == ["http://i/1.jpg", "http://i/2.jpg"]


def test_reassign_without_a_usable_matrix_is_a_drop():
    doc = mmc4.Mmc4Document(
        "d", "http://page", ("a.",), (mmc4.Mmc4Image("http://i/1.jpg", 0, 0.2),)
    )
    assert mmc4.reassign(doc).reason == "bad_similarity_matrix"


def test_malformed_similarity_matrix_parses_as_none():
    for matrix in ('[["x", 0.1]]', "[[0.1, 0.2], [0.3]]", "[0.1]", '"no"', "[[true]]"):
        line = (
            '{"url": "http://a", "text_list": ["a.", "b."], "image_info": [{"raw_url": "http://i/1.jpg",'
            ' "matched_text_index": 0, "matched_sim": 0.3}], "similarity_matrix": ' + matrix + "}"
        )
        parsed = mmc4.parse_line(line.encode(), "docs.jsonl", 1)
        assert not isinstance(parsed, Drop) and parsed.similarity_matrix is None
