"""The reader API, and the shards as other libraries' users load them:
``webdataset`` and Hugging Face ``datasets`` with the features the manifest gives."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from corpora import reader
from corpora.config.bundled_sample import SAMPLE_TOKENIZER
from tests.corpora.shards.built import IMAGE, PER_IMAGE, SEQ_LEN, write_build
from tests.helpers import read_tar


@pytest.fixture(scope="module")
def build(tmp_path_factory) -> str:
    return write_build(str(tmp_path_factory.mktemp("build")))


def test_reader_yields_arrays_decoded_images_and_provenance(build):
    manifest = reader.load_manifest(build)
    samples = list(reader.iter_samples(reader.shard_urls(build)))
    assert len(samples) == manifest["totals"]["samples"]
    expected = [
        s for shard in manifest["shards"] for s in read_tar(os.path.join(build, shard["path"]))
    ]
    for sample, raw in zip(samples, expected):
        assert sample.key == raw["__key__"]
        np.testing.assert_array_equal(sample.input_ids, raw["input_ids.npy"])
        np.testing.assert_array_equal(sample.segment_ids, raw["segment_ids.npy"])
        assert sample.documents == raw["json"]["documents"]
        assert len(sample.images) == int((sample.input_ids == IMAGE).sum()) // PER_IMAGE
    two = next(s for s in samples if any(d["id"] == "two" for d in s.documents))
    before = 0
    for d in two.documents:
        if d["id"] == "two":
            break
        before += len(d["images"])
    assert [im.size for im in two.images[before : before + 2]] == [(16, 12), (17, 12)]
    # brace patterns expand, as in the manifest
    pattern = os.path.join(build, manifest["shard_pattern"])
    assert [s.key for s in reader.iter_samples(pattern, decode_images=False)] == [
        s.key for s in samples
    ]


def test_verify_shard_checks_count_and_sha256(build, tmp_path):
    manifest = reader.load_manifest(build)
    assert reader.verify_build(build) == []
    entry = manifest["shards"][0]
    url = os.path.join(build, entry["path"])
    with pytest.raises(reader.ShardMismatch, match="samples"):
        reader.verify_shard(url, {**entry, "samples": entry["samples"] + 1})
    corrupt = tmp_path / "corrupt.tar"
    data = bytearray(open(url, "rb").read())
    data[-2000] ^= 0xFF  # inside the last member or the tar padding
    corrupt.write_bytes(bytes(data))
    with pytest.raises(reader.ShardMismatch, match="sha256"):
        reader.verify_shard(str(corrupt), entry)


def test_webdataset_library_loads_the_shards_unchanged(build):
    import webdataset as wds

    manifest = json.load(open(os.path.join(build, "manifest.json")))
    url = os.path.join(build, manifest["shard_pattern"])
    dataset = wds.WebDataset(url, shardshuffle=False, empty_check=False).decode("pil")
    samples = list(dataset)
    assert len(samples) == manifest["totals"]["samples"]
    first = samples[0]
    assert first["input_ids.npy"].dtype == np.int32 and first["input_ids.npy"].shape == (SEQ_LEN,)
    assert first["img000.jpg"].size == (16, 12)
    counts = [len([k for k in s if k.startswith("img")]) for s in samples]
    assert max(counts) == manifest["max_images_per_sample"] == 4
    assert sum(counts) == manifest["totals"]["images"]


def test_hugging_face_datasets_loads_with_the_manifest_features(build, tmp_path):
    import datasets

    manifest = reader.load_manifest(build)
    files = reader.shard_urls(build)
    counts = [len(s.images) for s in reader.iter_samples(files, decode_images=False)]
    assert counts[:5] == [1] * 5 and max(counts) == 4  # what defeats HF's schema inference

    # left to infer from the first five samples, HF keeps only img000.jpg and
    # silently loses the other images of later samples
    inferred = datasets.load_dataset(
        "webdataset",
        data_files={"train": files},
        split="train",
        cache_dir=str(tmp_path / "inferred"),
    )
    assert [k for k in inferred.features if k.startswith("img")] == ["img000.jpg"]

    features = reader.hf_features(manifest)
    dataset = datasets.load_dataset(
        "webdataset",
        data_files={"train": files},
        split="train",
        features=features,
        cache_dir=str(tmp_path / "cache"),
    )
    assert len(dataset) == manifest["totals"]["samples"]
    rows = list(dataset)
    assert [sum(r[f"img{i:03d}.jpg"] is not None for i in range(4)) for r in rows] == counts
    mine = list(reader.iter_samples(files))
    for row, sample in zip(rows, mine):
        assert row["__key__"] == sample.key
        np.testing.assert_array_equal(np.asarray(row["input_ids.npy"], np.int32), sample.input_ids)
        np.testing.assert_array_equal(np.asarray(row["positions.npy"], np.int32), sample.positions)
        assert row["json"]["documents"] == sample.documents
        assert row["img000.jpg"].size == sample.images[0].size


def test_locate_names_the_manifest_and_shards_of_a_build(build):
    manifest = reader.load_manifest(build)
    shards = [os.path.join(build, s["path"]) for s in manifest["shards"]]
    for given in (build, os.path.join(build, "manifest.json")):
        found = reader.locate(given)
        assert (found.manifest, found.shards, found.whole) == (manifest, shards, True)
    one = reader.locate(shards[1])
    assert (one.manifest, one.shards, one.whole) == (manifest, [shards[1]], False)


def test_a_shard_without_its_manifest_is_located_only_when_none_is_needed(build, tmp_path):
    alone = tmp_path / "alone.tar"
    alone.write_bytes(open(os.path.join(build, "mmc4-pairs-000000.tar"), "rb").read())
    found = reader.locate(str(alone), need_manifest=False)
    assert (found.manifest, found.shards) == (None, [str(alone)])
    with pytest.raises(reader.BuildInputError, match="^no manifest.json in "):
        reader.locate(str(alone))


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda d: os.path.join(d, "nothing"), "not found"),
        (lambda d: d, "no manifest.json"),
        (lambda d: _write(d, "manifest.json", "[1]"), "not a corpora manifest"),
        (
            lambda d: _write(
                d,
                "manifest.json",
                json.dumps(
                    {
                        "seq_len": 16,
                        "image_token_id": 9,
                        "bos_id": 1,
                        "eos_id": 2,
                        "pad_id": 0,
                        "tokens_per_image": 2,
                        "shards": [
                            {"path": "x.tar", "samples": 1, "bytes": 10, "sha256": "0" * 64}
                        ],
                    }
                ),
            ),
            "missing",
        ),
    ],
)
def test_locate_rejects_what_is_not_a_build(tmp_path, make, message):
    with pytest.raises(reader.BuildInputError, match=message):
        reader.locate(make(str(tmp_path)))


def _write(directory: str, name: str, text: str) -> str:
    path = os.path.join(directory, name)
    with open(path, "w") as handle:
        handle.write(text)
    return path


def test_text_decoder_uses_the_builds_tokenizer(tmp_path):
    import sentencepiece as spm

    ids = spm.SentencePieceProcessor(model_file=SAMPLE_TOKENIZER).encode("A cup of coffee.")
    decode = reader.text_decoder({"tokenizer": {"path": SAMPLE_TOKENIZER}})
    assert decode(np.array(ids, dtype=np.int32)) == "A cup of coffee."
    assert reader.text_decoder({"tokenizer": {"path": str(tmp_path / "gone.model")}}) is None
    assert reader.text_decoder(None) is None


def test_segment_parts_is_the_docstring_example():
    assert reader.segment_parts(
        [1, 9, 9, 9, 9, 5, 6, 2], image_token=9, tokens_per_image=2, bos=1, eos=2
    ) == [("bos",), ("image", 2), ("image", 2), ("text", [5, 6]), ("eos",)]


def test_segment_parts_of_a_split_piece_and_without_a_manifest():
    # a later piece of a split document: text, then an image, no BOS
    assert reader.segment_parts(np.array([7, 8, 9, 9, 2], dtype=np.int32), 9, 2, 1, 2) == [
        ("text", [7, 8]),
        ("image", 2),
        ("eos",),
    ]
    # no manifest: nothing is special
    assert reader.segment_parts([1, 9, 2], None, 3, None, None) == [("text", [1, 9, 2])]


# ------------------------------------------------ verified on read (issue 16, defect 5)


def _copy_build(build: str, tmp_path) -> str:
    import shutil

    return shutil.copytree(build, str(tmp_path / "copy"))


def cut_at_a_member_boundary(shard: str) -> None:
    """Cut ``shard`` just before its last sample's first member: the tar still reads."""
    import tarfile

    with tarfile.open(shard) as tar:
        members = tar.getmembers()
    last = members[-1].name.split(".", 1)[0]
    cut = next(m for m in members if m.name.split(".", 1)[0] == last)
    with open(shard, "r+b") as handle:
        handle.truncate(cut.offset)


def test_a_shard_cut_at_a_member_boundary_is_refused_naming_it(build, tmp_path):
    copy = _copy_build(build, tmp_path)
    entry = reader.load_manifest(copy)["shards"][0]
    shard = os.path.join(copy, entry["path"])
    cut_at_a_member_boundary(shard)
    assert len(list(reader.iter_samples(shard))) == entry["samples"] - 1  # reads as valid
    size = os.path.getsize(shard)
    with pytest.raises(reader.ShardMismatch, match=f"{size} bytes, the manifest says"):
        reader.verify_shard(shard, entry)
    with pytest.raises(reader.BuildInputError) as caught:
        reader.locate(copy, verify=True)
    assert str(caught.value) == (
        f"shard does not match the manifest: {shard}: {size} bytes,"
        f" the manifest says {entry['bytes']}"
    )
    assert reader.locate(copy).shards[0] == shard  # without verify: found, not checked
    assert reader.verify_build(copy) == [
        f"{shard}: {size} bytes, the manifest says {entry['bytes']}"
    ]


def test_a_shard_whose_size_is_right_but_bytes_are_not_is_refused(build, tmp_path):
    copy = _copy_build(build, tmp_path)
    entry = reader.load_manifest(copy)["shards"][1]
    shard = os.path.join(copy, entry["path"])
    data = bytearray(open(shard, "rb").read())
    data[700] ^= 0xFF
    open(shard, "wb").write(bytes(data))
    with pytest.raises(
        reader.BuildInputError, match=f"{shard}: sha256 [0-9a-f]{{64}}, the manifest"
    ):
        reader.locate(copy, verify=True)


@pytest.mark.parametrize(
    "path", ["../outside.tar", "/tmp/outside.tar", "sub/outside.tar", "file:outside.tar", 7]
)
def test_shard_paths_outside_the_build_are_refused(build, tmp_path, path):
    copy = _copy_build(build, tmp_path)
    manifest = reader.load_manifest(copy)
    manifest["shards"][0]["path"] = path
    with open(os.path.join(copy, "manifest.json"), "w") as handle:
        json.dump(manifest, handle)
    with pytest.raises(reader.BuildInputError) as caught:
        reader.locate(copy)
    assert "outside the build" in str(caught.value) or "not a corpora manifest" in str(caught.value)
    assert any("outside the build" in problem for problem in reader.verify_build(copy)) or path == 7


def test_a_link_out_of_the_build_is_refused(build, tmp_path):
    copy = _copy_build(build, tmp_path)
    entry = reader.load_manifest(copy)["shards"][0]
    outside = tmp_path / "elsewhere.tar"
    os.rename(os.path.join(copy, entry["path"]), outside)
    os.symlink(outside, os.path.join(copy, entry["path"]))
    with pytest.raises(reader.BuildInputError, match="outside the build.*a link"):
        reader.locate(copy)


@pytest.mark.parametrize(
    "change, named",
    [
        (
            lambda m: m.update(image_token_id="500"),
            "image_token_id is '500', not an integer in [-1, 2147483647]",
        ),
        (lambda m: m.update(tokenizer="t.model"), "tokenizer is 't.model'"),
        (lambda m: m.update(shards={"path": "x"}), "shards is {'path': 'x'}, not a list"),
        (lambda m: m["shards"][0].update(sha256=5), "shard 0's sha256 is 5"),
        (lambda m: m["shards"][1].update(bytes="12"), "shard 1's bytes is '12'"),
        (lambda m: m["shards"].append(None), "shard 2 is None"),
    ],
)
def test_a_manifest_with_fields_of_the_wrong_type_is_one_line(build, tmp_path, change, named):
    copy = _copy_build(build, tmp_path)
    manifest = reader.load_manifest(copy)
    change(manifest)
    path = os.path.join(copy, "manifest.json")
    with open(path, "w") as handle:
        json.dump(manifest, handle)
    with pytest.raises(reader.BuildInputError) as caught:
        reader.locate(copy)
    assert str(caught.value) == f"not a corpora manifest: {path} ({named})"
