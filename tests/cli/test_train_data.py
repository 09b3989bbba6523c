"""`corpora train data` and `corpora train energon-prepare` as a user runs them,
on builds made with `corpora build` (shared with tests/trainer)."""

from __future__ import annotations

import os
import re

import pytest

from tests.helpers import load_manifest, run_cli
from tests.trainer.builds import make_builds

pytestmark = [pytest.mark.slow, pytest.mark.integration]


@pytest.fixture(scope="module")
def builds(tmp_path_factory, image_server, tokenizer_path):
    return make_builds(tmp_path_factory, image_server, tokenizer_path)


def _mix(stdout: str) -> dict[str, tuple[float, float]]:
    """``build -> (share, asked)`` from the mix table, in percent."""
    rows = re.findall(r"^  (\S+)\s+([\d.]+)%\s+([\d.]+)%$", stdout, re.M)
    return {os.path.basename(name): (float(share), float(asked)) for name, share, asked in rows}


def test_simvlm_blend_prints_the_prefix_split_and_the_measured_mix(builds):
    result = run_cli(
        "train", "data",
        "--data", f"{builds.pairs}:8", "--data", f"{builds.c4}:1",
        "--batch-size", "3", "--objective", "prefixlm", "--batches", "2",
        "--mix-samples", "900", "--workers", "2", "--image-size", "16",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith("Blend of 2 build(s) by examples: seq_len 640")
    assert f"weight 8  {builds.pairs}  (mmc4-pairs: 20 shards, 60 samples, 60 images)" in out
    assert "stored 32x32, batched 16x16, at most 1 a sample" in out
    assert "Batch 0:" in out and "Batch 1:" in out and "Batch 2:" not in out
    assert "images [3, 1, 3, 16, 16] float32" in out
    assert re.search(r"encoder 0-\d+ \(\d+ tokens, bidirectional\), decoder \d+-\d+", out)
    assert re.search(r"doc 1 mmc4p-[0-9a-f]+: tokens 0-\d+, image 0 at 1-8", out)
    assert "images: [0] doc" in out
    mix = _mix(out)
    assert set(mix) == {"pairs", "c4"}
    for share, asked in mix.values():
        assert abs(share - asked) <= 0.03 * asked
    assert mix["pairs"][1] == pytest.approx(88.9)


def test_simvlm_eight_to_one_by_documents_is_measured_in_every_unit(builds):
    result = run_cli(
        "train", "data",
        "--data", f"{builds.pairs_packed}:8", "--data", f"{builds.c4}:1",
        "--weight-unit", "documents", "--objective", "prefixlm", "--batches", "0",
        "--mix-samples", "300",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "Mix over 300 samples (by documents):" in result.stdout
    mix = _mix(result.stdout)
    assert mix["pairs_packed"][1] == pytest.approx(88.9) and mix["c4"][1] == pytest.approx(11.1)
    for share, asked in mix.values():
        assert abs(share - asked) <= 0.03 * asked
    # the same samples in every unit: documents counted over 2,000 of them
    counts = re.findall(r"^ {40,}(\d+)\s+(\d+)\s+(\d+)\s+(\d+)$", result.stdout, re.M)
    (pairs_samples, pairs_docs, pairs_images, _), (c4_samples, c4_docs, c4_images, _) = [
        tuple(map(int, row)) for row in counts
    ]
    assert pairs_docs + c4_docs >= 2000 and pairs_samples + c4_samples == 300
    assert abs(pairs_docs / c4_docs / 8 - 1) <= 0.03
    assert pairs_images == pairs_docs and c4_images == 0


def test_prefixlm_padding_is_measured_unpacked_and_packed_to_the_suggested_lengths(builds):
    result = run_cli(
        "train", "data",
        "--data", f"{builds.pairs_packed}:8", "--data", f"{builds.c4}:1",
        "--weight-unit", "documents", "--objective", "prefixlm", "--batches", "1",
        "--batch-size", "8", "--mix-samples", "0", "--image-size", "16",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    found = re.findall(r"encoder ([\d.]+)% real, decoder ([\d.]+)% real$", result.stdout, re.M)
    (unpacked, packed) = [tuple(map(float, pair)) for pair in found]
    assert "PrefixLM streams over 20 batches:" in result.stdout
    assert max(unpacked) < 60 and min(packed) >= 80, result.stdout
    suggested = re.search(r"suggested --encoder-len (\d+) --decoder-len (\d+):", result.stdout)
    assert sum(map(int, suggested.groups())) == 640
    given = run_cli(
        "train", "data",
        "--data", f"{builds.pairs_packed}:8", "--data", f"{builds.c4}:1",
        "--weight-unit", "documents", "--objective", "prefixlm", "--batches", "1",
        "--mix-samples", "0", "--encoder-len", "352",
    )  # fmt: skip
    assert given.returncode == 2
    assert "encoder_len and decoder_len: give both (packed PrefixLM) or neither" in given.stderr


def test_vila_blend_by_images_shows_where_the_labels_fall(builds):
    result = run_cli(
        "train", "data",
        "--data", builds.interleaved, "--data", builds.pairs,
        "--weight-unit", "images", "--batch-size", "2", "--batches", "1", "--mix-samples", "300",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "labels (next text token) at" in result.stdout
    assert re.search(r"images 0-2 at \d+-\d+, \d+-\d+, \d+-\d+", result.stdout)  # 3 slot runs
    mix = _mix(result.stdout)
    assert abs(mix["interleaved"][0] - 50.0) <= 1.5 and abs(mix["pairs"][0] - 50.0) <= 1.5


@pytest.mark.parametrize(
    "other, field",
    [
        ("pairs_tpi16", "tokens_per_image: 8 vs 16"),
        ("pairs_other_tokenizer", "tokenizer sha256"),
    ],
)
def test_mismatched_builds_exit_2_with_one_line(builds, other, field):
    result = run_cli("train", "data", "--data", builds.pairs, "--data", getattr(builds, other))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(
        f"corpora: {builds.pairs} and {getattr(builds, other)} differ in {field}"
    )


def test_unusable_sources_exit_2_with_one_line(builds, tmp_path):
    cases = [
        (["--data", str(tmp_path)], f"corpora: {tmp_path}: no manifest.json in {tmp_path}"),
        (
            ["--data", builds.pairs, "--data", builds.c4, "--weight-unit", "images"],
            f"corpora: {builds.c4} holds no images: it cannot be weighted by images",
        ),
    ]
    for args, start in cases:
        result = run_cli("train", "data", *args)
        assert result.returncode == 2, result.stdout
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(start), lines


def test_energon_prepare_writes_the_metadata(builds, tmp_path):
    import shutil

    build = str(tmp_path / "c4")
    shutil.copytree(builds.c4, build)
    result = run_cli("train", "energon-prepare", build)
    assert result.returncode == 0, result.stderr
    shards = len(load_manifest(build)["shards"])  # one index for each shard of the build
    assert result.stdout.startswith(f"Wrote {shards} .tar.idx file(s)")
    assert sorted(os.listdir(os.path.join(build, ".nv-meta"))) == [
        ".info.json",
        "dataset.yaml",
        "split.yaml",
    ]
    missing = run_cli("train", "energon-prepare", str(tmp_path / "nope"))
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1
