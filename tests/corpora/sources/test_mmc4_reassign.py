"""Issue 3's additions to corpora/sources/mmc4.py: --reassign, and a
similarity matrix that is not numbers never fails the reader."""

from corpora.record import Drop
from corpora.sources import mmc4


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
