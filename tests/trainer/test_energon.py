"""Energon metadata written from the manifest: the index offsets point at each
sample, the YAML/JSON files say what energon reads; and, where
megatron-energon is installed, energon itself reads the build with a cooker
and its own ``energon prepare`` writes the same indexes."""

from __future__ import annotations

import io
import json
import os
import shutil
import struct
import tarfile

import numpy as np
import pytest
import yaml

from corpora import reader
from trainer.energon import sample_offsets, write_energon_meta
from trainer.stream import DataError

pytestmark = [pytest.mark.slow, pytest.mark.integration]


@pytest.fixture
def build(builds, tmp_path) -> str:
    target = str(tmp_path / "interleaved")
    shutil.copytree(builds.interleaved, target)
    return target


def _index(path: str) -> list[int]:
    data = open(path + ".idx", "rb").read()
    return list(struct.unpack(f"<{len(data) // 8}Q", data))


def test_the_index_points_at_every_sample_and_the_end(build):
    written = write_energon_meta(build)
    manifest = reader.load_manifest(build)
    assert len([p for p in written if p.endswith(".tar.idx")]) == len(manifest["shards"])
    for url in reader.shard_urls(build, manifest):
        offsets = _index(url)
        keys = [s.key for s in reader.iter_samples(url, decode_images=False)]
        assert len(offsets) == len(keys) + 1
        with open(url, "rb") as handle:
            data = handle.read()
        for offset, key in zip(offsets, keys):
            header = tarfile.TarInfo.frombuf(data[offset : offset + 512], "utf-8", "strict")
            assert header.name == f"{key}.input_ids.npy"  # the sample's first member
        assert data[offsets[-1] : offsets[-1] + 512] == b"\0" * 512  # end of archive
        with open(url, "rb") as handle:
            assert sample_offsets(io.BufferedReader(handle)) == offsets


def test_the_nv_meta_files_say_what_energon_reads(build):
    write_energon_meta(build)
    manifest = reader.load_manifest(build)
    meta = os.path.join(build, ".nv-meta")
    info = json.load(open(os.path.join(meta, ".info.json")))
    assert info["shard_counts"] == {s["path"]: s["samples"] for s in manifest["shards"]}
    split = yaml.safe_load(open(os.path.join(meta, "split.yaml")))
    assert split == {"split_parts": {"train": [manifest["shard_pattern"]]}, "exclude": []}
    dataset = yaml.safe_load(open(os.path.join(meta, "dataset.yaml")))
    assert dataset == {
        "__module__": "megatron.energon",
        "__class__": "CrudeWebdataset",
        "subflavors": {"corpus": "mmc4"},
    }


def test_a_shard_short_of_its_count_is_refused(build):
    shard = os.path.join(build, "mmc4-000000.tar")
    with tarfile.open(shard) as tar:
        second = next(m for m in tar.getmembers() if "-000001." in m.name)
    with open(shard, "r+b") as handle:
        handle.truncate(second.offset)
    with pytest.raises(DataError, match="mmc4-000000.tar: 1 samples, the manifest says 2"):
        write_energon_meta(build)


def test_energon_reads_the_build_with_a_cooker_and_prepares_the_same_index(build, tmp_path):
    energon = pytest.importorskip("megatron.energon")
    from megatron.energon.flavors.webdataset.prepare import WebdatasetPreparator

    untouched = str(tmp_path / "untouched")
    shutil.copytree(build, untouched)
    with pytest.raises(ValueError, match="Invalid dataset"):  # energon refuses a bare build
        energon.get_train_dataset(
            untouched,
            batch_size=1,
            shuffle_buffer_size=None,
            max_samples_per_sequence=None,
            worker_config=energon.WorkerConfig.default_worker_config(0),
        )
    write_energon_meta(build)

    # The cooker of docs/trainer.md.
    @energon.edataclass
    class PackedSample(energon.Sample):
        input_ids: np.ndarray
        segment_ids: np.ndarray
        positions: np.ndarray
        images: list
        documents: list

    @energon.stateless
    def cook_packed(sample: dict) -> PackedSample:
        names = sorted(k for k in sample if k.startswith("img") and k.endswith(".jpg"))
        return PackedSample(
            **energon.basic_sample_keys(sample),
            input_ids=sample["input_ids.npy"],
            segment_ids=sample["segment_ids.npy"],
            positions=sample["positions.npy"],
            images=[sample[name] for name in names],
            documents=sample["json"]["documents"],
        )

    class PackedTaskEncoder(energon.DefaultTaskEncoder):
        cookers = [energon.Cooker(cook_packed, has_subflavors={"corpus": "mmc4"})]
        decoder = energon.SampleDecoder(image_decode="pil")

        def batch(self, samples):
            return samples

    dataset = energon.get_train_dataset(
        build,
        batch_size=4,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
        worker_config=energon.WorkerConfig.default_worker_config(0),
        task_encoder=PackedTaskEncoder(),
    )
    expected = {s.key: s for s in reader.iter_samples(reader.shard_urls(build), decode_images=True)}
    seen = set()
    for _, batch in zip(range(12), energon.get_loader(dataset)):
        for sample in batch:
            ours = expected[sample.__key__]
            assert np.array_equal(sample.input_ids, ours.input_ids)
            assert sample.input_ids.dtype == np.int32 and sample.__subflavors__["corpus"] == "mmc4"
            assert [im.size for im in sample.images] == [im.size for im in ours.images]
            assert sample.documents == ours.documents
            seen.add(sample.__key__)
    assert seen == set(expected)  # 48 samples over 24: every sample came

    # energon's own prepare writes the same .tar.idx files
    prepared = str(tmp_path / "prepared")
    shutil.copytree(untouched, prepared)
    names = [s["path"] for s in reader.load_manifest(prepared)["shards"]]
    WebdatasetPreparator.prepare_dataset(
        energon.epathlib.EPath(prepared), names, split_parts_ratio=[("train", 1.0)], workers=1
    )
    for name in names:
        ours = open(os.path.join(build, name + ".idx"), "rb").read()
        assert open(os.path.join(prepared, name + ".idx"), "rb").read() == ours
