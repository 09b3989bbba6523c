"""The catalog: every spec of the source modules, each corpus's reader, filter
and layout wired as the docs say, and the examples in the modules' docstrings hold."""

import doctest
import io
import os

import pytest

from corpora.config import catalog
from corpora.config.settings import corpus_settings
from corpora.record import Document, Drop
from corpora.sources import c4, coyo, filters
from corpora.sources.mmc4 import assign, layouts
from corpora.sources.mmc4 import reader as mmc4
from corpora.sources.wit import reader as wit
from tests import fixtures
from tests.helpers import REPO, load_manifest, read_tar, run_cli


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


def toy_module() -> str:
    """The example module of docs/corpora.md's "Adding a corpus", as the page shows it."""
    with open(os.path.join(REPO, "docs", "corpora.md"), encoding="utf-8") as handle:
        section = handle.read().split("\n## Adding a corpus\n", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


@pytest.fixture
def toy_package(tmp_path):
    package = tmp_path / "packages" / "toy_sources"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text('"""Corpora of the toy project."""\n')
    (package / "toy.py").write_text(toy_module())
    return {"PYTHONPATH": str(tmp_path / "packages"), catalog.SOURCES_ENV: "toy_sources"}


@pytest.mark.slow
@pytest.mark.integration
def test_a_corpus_added_by_one_spec_file_builds_end_to_end(toy_package, tmp_path, image_server):
    listed = run_cli("list", env=toy_package)
    assert listed.returncode == 0, listed.stderr
    assert "toy             a toy corpus of image URLs and captions" in listed.stdout
    assert "--min-words" in run_cli("build", "--help", env=toy_package).stdout

    inputs = tmp_path / "in"
    inputs.mkdir()
    lines = [
        (image_server.url("/img/64x48/kite.jpg"), "A red kite over the beach."),
        (image_server.url("/img/64x48/gull.jpg"), "Gulls."),  # one word: fewer than 3
        (image_server.url("/status/404"), "An image that is gone."),
        (image_server.url("/img/64x48/none.jpg"), "  "),
        (image_server.url("/img/48x64/cat.jpg"), "The cat sleeps on the windowsill."),
    ]
    (inputs / "pairs.tsv").write_text("".join(f"{url}\t{text}\n" for url, text in lines))
    output = str(tmp_path / "out")
    result = run_cli(
        "build",
        "toy",
        "--input",
        str(inputs),  # a directory: the spec's input patterns
        "--output",
        output,
        "--min-words",
        "3",
        "--smoke",
        "--workers",
        "1",
        "--allow-private-urls",
        env=toy_package,
    )
    assert result.returncode == 0, result.stderr
    manifest = load_manifest(output)
    assert manifest["funnel"] == {
        "unit": "pair",
        "input": 5,
        "kept": 2,
        "dropped": {"too_few_words": 1, "http_404": 1, "empty_caption": 1},
    }
    assert manifest["settings"]["corpus_options"] == {"min_words": 3}
    samples = [s for shard in manifest["shards"] for s in read_tar(f"{output}/{shard['path']}")]
    documents = [d for s in samples for d in s["json"]["documents"]]
    assert sorted(d["corpus"] for d in documents) == ["toy", "toy"]
    assert sorted(d["images"][0]["url"].rsplit("/", 1)[1] for d in documents) == [
        "cat.jpg",
        "kite.jpg",
    ]
    assert sum(m.startswith("img") for s in samples for m in s["__members__"]) == 2

    refused = run_cli("build", "c4", "--input", str(inputs), "--min-words", "2", env=toy_package)
    assert refused.returncode == 2
    assert refused.stderr.strip() == "corpora: --min-words does not apply to c4 (only to toy)"
