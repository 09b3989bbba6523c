"""Packing inside a real Beam pipeline: plan on metadata, join bytes back,
number globally, write shards; byte-identical with 1 and 2 workers."""

from __future__ import annotations

import dataclasses
import os
import shutil

import numpy as np
import pytest

from corpora import reader
from corpora.config import settings as build_settings
from corpora.config.bundled_sample import SAMPLE_IMAGES, materialize_sample
from pipelines.launch import run_build
from tests.helpers import load_manifest, read_tar, run_cli

pytestmark = [pytest.mark.slow, pytest.mark.integration]


def _settings(tmp_path, output: str, **overrides) -> build_settings.BuildSettings:
    sample = materialize_sample(str(tmp_path / "input"))
    base = build_settings.corpus_settings("mmc4-pairs", (sample,), output)
    base = build_settings.smoke(base)
    base = base.replace(fetch=dataclasses.replace(base.fetch, allow_local_files=(SAMPLE_IMAGES,)))
    # seq_len 40 splits every pair (bos + 16 image slots + ~37 text tokens + eos)
    return base.replace(seq_len=40, samples_per_shard=3, pack_groups=3, **overrides)


def _files(directory: str) -> dict[str, bytes]:
    return {
        name: open(os.path.join(directory, name), "rb").read()
        for name in sorted(os.listdir(directory))
        if os.path.isfile(os.path.join(directory, name))
    }


def test_one_and_two_workers_write_identical_shards_and_manifest(tmp_path):
    output = str(tmp_path / "out")
    settings = _settings(tmp_path, output)
    first = run_build(settings, workers=1)
    one = _files(output)
    shutil.rmtree(output)
    second = run_build(settings, workers=2)
    two = _files(output)

    assert (
        sorted(one)
        == sorted(two)
        == sorted(
            ["manifest.json", "stats.json", "failures.parquet", "dedup_index.parquet"]
            + [s["path"] for s in first["shards"]]
        )
    )
    for name in one:
        if name not in (
            "manifest.json",
            "failures.parquet",
        ):  # shards and stats.json: byte for byte
            assert one[name] == two[name], name
    strip = lambda m: {k: v for k, v in m.items() if k != "created"}  # noqa: E731
    assert strip(first) == strip(second)
    assert first["totals"]["shards"] >= 3  # several groups and several shards were numbered

    # every pair was split at its image boundary and every piece is in the shards
    samples = list(reader.iter_samples(reader.shard_urls(output)))
    pieces = [d for s in samples for d in s.documents]
    assert first["funnel"]["kept"] == len({d["id"] for d in pieces}) == 8
    assert all(d["split"] for d in pieces) and len(pieces) == first["totals"]["documents"]
    by_id: dict[str, list[dict]] = {}
    for d in pieces:
        by_id.setdefault(d["id"], []).append(d)
    for entries in by_id.values():
        assert sorted(d["piece"] for d in entries) == list(range(entries[0]["pieces"]))
        assert sum(d["image_tokens"] for d in entries) == 16  # the slot run is whole, in one piece
    assert reader.verify_build(output) == []
    for s in samples:
        assert s.input_ids.shape == (40,)
        for n, d in enumerate(s.documents, 1):
            np.testing.assert_array_equal(s.positions[s.segment_ids == n], np.arange(d["tokens"]))
    # the sequences are numbered globally: keys run 0..k-1 within each shard
    keys = [s.key for s in samples]
    assert keys == sorted(keys) and keys[0].endswith("-000000-000000")


def test_no_pack_writes_one_piece_per_sample_through_the_cli(tmp_path):
    sample = materialize_sample(str(tmp_path / "input"))
    output = str(tmp_path / "unpacked")
    result = run_cli(
        "build",
        "mmc4-pairs",
        "--input",
        sample,
        "--output",
        output,
        "--smoke",
        "--no-pack",
        "--workers",
        "1",
        "--allow-local-files",
        SAMPLE_IMAGES,
    )
    assert result.returncode == 0, result.stderr
    manifest = load_manifest(output)
    samples = [
        s for shard in manifest["shards"] for s in read_tar(os.path.join(output, shard["path"]))
    ]
    assert len(samples) == manifest["funnel"]["kept"] == 8
    for s in samples:
        assert len(s["json"]["documents"]) == 1
        assert set(np.unique(s["segment_ids.npy"])) == {0, 1}
        assert s["__members__"] == [
            "input_ids.npy",
            "segment_ids.npy",
            "positions.npy",
            "img000.jpg",
            "json",
        ]
    assert manifest["settings"]["pack"] is False
    assert not [n for n in os.listdir(output) if ".tmp" in n]
