import json
import os

from corpora.record import Drop
from corpora.sources.mmc4 import Mmc4Document, parse_line
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
