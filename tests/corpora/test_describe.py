from __future__ import annotations

import pytest

from corpora.describe import describe_sample, find_sample
from corpora.settings import SAMPLE_TOKENIZER
from tests.corpora.shards.built import write_build


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
