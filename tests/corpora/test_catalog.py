"""The catalog: every spec of the source modules, each corpus's reader, filter
and layout wired as the docs say, and the examples in the modules' docstrings hold."""

import doctest
import io

import pytest

from corpora import assign, catalog, filters, layouts
from corpora.record import Document, Drop
from corpora.settings import corpus_settings
from corpora.sources import c4, coyo, mmc4, wit
from tests import fixtures


@pytest.mark.parametrize("module", [assign, catalog, filters, layouts, c4, coyo, mmc4, wit])
def test_docstring_examples(module):
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def read_all(name, data: bytes, path: str, built) -> list:
    return list(catalog.get(name).read(io.BytesIO(data), path, built))


def test_mmc4_pairs_uses_the_reassigned_matches():
    line = fixtures.mmc4_lines()[3].encode()  # upstream matched both images to sentence 0
    s = fixtures.SENTENCES
    plain = read_all("mmc4-pairs", line, "docs.jsonl", corpus_settings("mmc4-pairs", (), "out"))
    assert [p.chunks[1].text for p in plain] == [s[0], s[0]]
    fixed = read_all(
        "mmc4-pairs", line, "docs.jsonl", corpus_settings("mmc4-pairs", (), "out", reassign=True)
    )
    assert [p.chunks[1].text for p in fixed] == [s[1], s[0]]


def test_mmc4_and_reordered_share_reader_and_filter_but_not_layout():
    lines = b"\n".join(
        line if isinstance(line, bytes) else line.encode() for line in fixtures.mmc4_lines()
    )
    for name in ("mmc4", "mmc4-reordered"):
        spec = catalog.get(name)
        built = corpus_settings(name, (), "out")
        results = read_all(name, lines, "docs.jsonl", built)
        assert (
            len(results) == 10 and spec.unit == "document" and spec.drop_on_image_failure is False
        )
        doc = results[0]
        assert isinstance(doc, Document) and doc.corpus == name
        laid_out = spec.layout(spec.metadata_filter(doc, built), built)
        kinds = [c.kind for c in laid_out.chunks]
        assert kinds == (
            ["text", "image", "text", "image", "text"]
            if name == "mmc4"
            else ["image", "image", "text", "text", "text"]
        )


def test_coyo_filter_runs_on_the_reader_records(tmp_path):
    path = fixtures.write_coyo_parquet(str(tmp_path / "part-0.parquet"), fixtures.coyo_rows())
    spec, built = catalog.get("coyo"), corpus_settings("coyo", (), "out")
    with open(path, "rb") as stream:
        docs = [r for r in spec.read(stream, path, built) if isinstance(r, Document)]
    outcomes = [spec.metadata_filter(d, built) for d in docs]
    assert [o.id for o in outcomes if isinstance(o, Document)] == [
        "coyo-5626407855002",
        "coyo-1125282207474",
        "coyo-1434519186493",
        "coyo-9000000000001",
        "coyo-9000000000002",
        "coyo-9000000000003",
        "coyo-9000000000004",
        "coyo-9000000000005",
        "coyo-9000000000012",
    ]
    assert sorted(o.reason for o in outcomes if isinstance(o, Drop)) == [
        "clip_similarity_below_min"
    ] * 4 + ["missing_clip_similarity"]
