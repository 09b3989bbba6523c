from __future__ import annotations

import io
import os
import tarfile

import pytest

from corpora.config.bundled_sample import SAMPLE_TOKENIZER
from corpora.reader import BuildInputError
from corpora.stats.describe import describe_sample, find_sample
from tests.corpora.shards.built import write_build
from tests.corpora.shards.test_reading import cut_at_a_member_boundary


def test_a_sample_is_found_across_shards_and_described_in_place(tmp_path):
    build = write_build(str(tmp_path), tokenizer_path=SAMPLE_TOKENIZER)
    sample, manifest = find_sample(build, 5)  # the second shard's second sample
    assert sample.key == "mmc4-pairs-000001-000001" and manifest["corpus"] == "mmc4-pairs"
    text = describe_sample(sample, manifest)
    lines = text.splitlines()
    assert lines[0] == (
        f"sample {sample.key} in mmc4-pairs-000001.tar: 32 tokens, {sample.tokens} used, "
        f"{len(sample.images)} images"
    )
    assert any(line.startswith("── segment 1: ") for line in lines)
    assert "<s> [image 0: " in text and "4 slots]" in text and "</s>" in text


def test_a_sample_past_the_end_is_named(tmp_path):
    build = write_build(str(tmp_path))
    with pytest.raises(IndexError, match=r"^sample 99 out of range: .* holds \d+ samples$"):
        find_sample(build, 99)


# ------------------------------------------------ verified on read (issue 16, defect 5)


def test_a_shard_cut_short_is_refused_before_it_is_described(tmp_path):
    build = write_build(str(tmp_path))
    shard = os.path.join(build, "mmc4-pairs-000000.tar")
    cut_at_a_member_boundary(shard)
    with pytest.raises(BuildInputError, match="mmc4-pairs-000000.tar: .* bytes, the manifest"):
        find_sample(build, 0)
    sample, _ = find_sample(build, 0, verify=False)  # asked not to check: read as it is
    assert sample.key == "mmc4-pairs-000000-000000"


@pytest.mark.parametrize(
    "data", [b"junk" * 300, b"\x1f\x8b" + b"\0" * 600, b""], ids=["junk", "gzip", "empty"]
)
def test_an_unreadable_tar_is_one_line(tmp_path, data):
    shard = tmp_path / "x-000000.tar"
    shard.write_bytes(data)
    with pytest.raises((BuildInputError, IndexError)) as caught:
        find_sample(str(shard), 0)
    assert "\n" not in str(caught.value)


def test_a_sample_with_documents_of_the_wrong_shape_is_one_line(tmp_path):
    build = write_build(str(tmp_path))
    shard = os.path.join(build, "mmc4-pairs-000000.tar")
    with tarfile.open(shard) as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar.getmembers()]
    with tarfile.open(shard, "w") as tar:
        for member, data in members:
            if member.name.endswith(".json"):
                data = b'{"documents": "not a list"}'
                member.size = len(data)
            tar.addfile(member, io.BytesIO(data))
    with pytest.raises(BuildInputError, match="has no list of documents"):
        find_sample(build, 0, verify=False)
