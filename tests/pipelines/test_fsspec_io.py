"""The fsspec bridge that makes hf:// inputs work, exercised with fsspec's
in-memory filesystem (hf:// itself needs network)."""

import fsspec
import pytest
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from corpora import settings
from pipelines.build import run_build
from pipelines.fsspec_io import FsspecFileSystem, HuggingFaceFileSystem
from tests import fixtures


class MemoryFileSystem(FsspecFileSystem):
    PROTOCOL = "memory"


@pytest.fixture
def memory():
    fs = fsspec.filesystem("memory")
    yield fs
    fs.rm("/corpora-test", recursive=True)


def test_hf_scheme_is_registered():
    assert isinstance(FileSystems.get_filesystem("hf://datasets/kakaobrain/coyo-700m/data/x.parquet"),
                      HuggingFaceFileSystem)


def test_match_and_open_through_fsspec(memory):
    memory.pipe("/corpora-test/data/part-00000-a-c000.snappy.parquet", b"one")
    memory.pipe("/corpora-test/data/part-00001-b-c000.snappy.parquet", b"two")
    memory.pipe("/corpora-test/data/README.md", b"readme")
    (result,) = FileSystems.match(["memory://corpora-test/data/part-*.parquet"])
    paths = sorted(m.path for m in result.metadata_list)
    assert paths == ["memory://corpora-test/data/part-00000-a-c000.snappy.parquet",
                     "memory://corpora-test/data/part-00001-b-c000.snappy.parquet"]
    assert [m.size_in_bytes for m in sorted(result.metadata_list, key=lambda m: m.path)] == [3, 3]
    with FileSystems.open(paths[1], compression_type=CompressionTypes.UNCOMPRESSED) as stream:
        assert stream.read() == b"two"
    assert FileSystems.match(["memory://corpora-test/nothing-*.parquet"])[0].metadata_list == []


@pytest.mark.slow
def test_c4_build_reads_its_input_through_fsspec(memory, tmp_path, tokenizer_path):
    local = fixtures.write_c4_json_gz(str(tmp_path), fixtures.c4_lines())
    with open(local, "rb") as handle:
        memory.pipe("/corpora-test/c4/en/c4-train.00000-of-00001.json.gz", handle.read())
    built = settings.c4(("memory://corpora-test/c4/en/c4-train.*.json.gz",), str(tmp_path / "out"),
                        tokenizer=tokenizer_path, seq_len=512, tokens_per_image=8)
    manifest = run_build(built, workers=1)
    assert manifest["funnel"] == fixtures.C4_FUNNEL
