"""The reader API, and the shards as other libraries' users load them:
``webdataset`` and Hugging Face ``datasets`` with the features the manifest gives."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from corpora import pack, reader, shards
from corpora.manifest import MANIFEST, build_manifest
from corpora.record import ImageChunk
from corpora.settings import BuildSettings
from corpora.tokenize import Span, TokenizedDocument, TokenizerInfo
from tests.helpers import read_tar
from tests.servers import image_bytes

SEQ_LEN, PER_IMAGE, IMAGE, PAD = 32, 4, 500, 0


def image_doc(name: str, text: int, images: int) -> TokenizedDocument:
    ids, spans, chunks = [1], [Span("bos", 0, 1)], []
    for i in range(images):
        spans.append(Span("image", len(ids), len(ids) + PER_IMAGE, i))
        ids += [IMAGE] * PER_IMAGE
        chunks.append(
            ImageChunk(f"http://img/{name}/{i}.jpg", data=image_bytes(16 + i, 12, f"{name}{i}"))
        )
    spans.append(Span("text", len(ids), len(ids) + text))
    ids += [3 + (len(ids) + j) % 200 for j in range(text)]
    spans.append(Span("eos", len(ids), len(ids) + 1))
    ids.append(2)
    provenance = {"id": name, "corpus": "mmc4-pairs", "images": [{"url": c.url} for c in chunks]}
    return TokenizedDocument(
        name, "mmc4-pairs", np.array(ids, np.int32), tuple(spans), tuple(chunks), provenance
    )


@pytest.fixture(scope="module")
def build(tmp_path_factory) -> str:
    """Two shards written by the core: the first five samples hold one image
    each (long one-image documents packed first), a later one holds two."""
    out = str(tmp_path_factory.mktemp("build"))
    docs = [image_doc(f"long{i}", 24, 1) for i in range(6)] + [
        image_doc(f"pair{i}", 3, 1) for i in range(2)
    ]
    docs.append(image_doc("two", 2, 2))
    sequences = list(pack.pack(docs, SEQ_LEN, PAD))
    per_shard = 4
    infos = []
    for index in range(0, len(sequences), per_shard):
        shard = index // per_shard
        name = shards.shard_name("mmc4-pairs", shard)
        with open(os.path.join(out, name), "wb") as stream:
            info = shards.write_shard(
                stream,
                [
                    (shards.sample_key("mmc4-pairs", shard, i), s)
                    for i, s in enumerate(sequences[index : index + per_shard])
                ],
            )
        infos.append({"index": shard, "path": name, **info})
    settings = BuildSettings(
        "mmc4-pairs",
        ("in.jsonl",),
        out,
        seq_len=SEQ_LEN,
        tokens_per_image=PER_IMAGE,
        samples_per_shard=per_shard,
    )
    tokenizer = TokenizerInfo("t.model", "0" * 64, 500, 1, 2, PAD, IMAGE, PER_IMAGE)
    kept = len(docs)
    manifest = build_manifest(settings, tokenizer, infos, kept, kept, {})
    with open(os.path.join(out, MANIFEST), "w") as handle:
        json.dump(manifest, handle)
    return out


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
