import gzip

from corpora.record import Document, Drop
from corpora.sources import c4
from tests import fixtures


def test_real_upstream_file_reads_as_text_only_documents():
    with open(fixtures.C4_FIRST3, "rb") as stream:
        docs = list(c4.read(stream, fixtures.C4_FIRST3))
    real = fixtures.c4_real_rows()
    assert [d.source_url for d in docs] == [r["url"] for r in real]
    assert [d.chunks[0].text for d in docs] == [r["text"] for r in real]
    assert all(len(d.chunks) == 1 and not d.images for d in docs)
    assert docs[0].meta["timestamp"] == "2019-04-25T12:57:54Z"
    assert docs[0].id == c4.document_id(real[0]["url"]) and docs[0].id.startswith("c4-")


def test_bad_lines_are_dropped_each_with_its_reason(tmp_path):
    path = fixtures.write_c4_json_gz(str(tmp_path), fixtures.c4_lines())
    with open(path, "rb") as stream:
        results = list(c4.read(stream, path))
    assert [r.reason if isinstance(r, Drop) else "kept" for r in results] == ["kept"] * 5 + [
        "missing_url",
        "empty_text",
        "missing_text",
        "not_utf8",
        "bad_json",
    ]
    assert results[-1].record_id == "c4-train.00000-of-00001.json.gz:10"


def test_plain_jsonl_is_read_too(tmp_path):
    path = tmp_path / "c4.jsonl"
    path.write_bytes(gzip.decompress(open(fixtures.C4_FIRST3, "rb").read()))
    with open(path, "rb") as stream:
        assert all(isinstance(r, Document) for r in c4.read(stream, str(path)))
