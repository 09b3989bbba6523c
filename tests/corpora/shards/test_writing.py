"""The tar writer: fixed member metadata and order, so equal samples give equal bytes."""

from __future__ import annotations

import hashlib
import io
import tarfile

import numpy as np

from corpora import pack, reader, shards
from tests.corpora.shards.built import image_doc


def _write(sequences) -> tuple[bytes, dict]:
    stream = io.BytesIO()
    info = shards.write_shard(
        stream, [(shards.sample_key("c", 0, i), s) for i, s in enumerate(sequences)]
    )
    return stream.getvalue(), info


def test_members_have_fixed_metadata_and_order_and_bytes_repeat():
    docs = [image_doc("a", 5, 2), image_doc("b", 10, 0)]
    data, info = _write(list(pack.pack(docs, 32, 0)))
    assert info["sha256"] == hashlib.sha256(data).hexdigest() and info["bytes"] == len(data)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == [
        "c-000000-000000.input_ids.npy",
        "c-000000-000000.segment_ids.npy",
        "c-000000-000000.positions.npy",
        "c-000000-000000.img000.jpg",
        "c-000000-000000.img001.jpg",
        "c-000000-000000.json",
    ]
    assert {(m.mtime, m.uid, m.gid, m.uname, m.gname, m.mode) for m in members} == {
        (0, 0, 0, "", "", 0o444)
    }
    assert (info["samples"], info["documents"], info["images"], info["max_images_per_sample"]) == (
        1,
        2,
        2,
        2,
    )
    # the same documents in a fresh packer give the same bytes
    assert _write(list(pack.pack([image_doc("a", 5, 2), image_doc("b", 10, 0)], 32, 0)))[0] == data


def test_read_back_round_trips_arrays_images_and_json():
    sequences = list(pack.pack([image_doc("a", 5, 1), image_doc("b", 30, 1)], 32, 0))
    data, _ = _write(sequences)
    back = list(reader.iter_tar_samples(io.BytesIO(data)))
    assert len(back) == len(sequences) == 2
    for sample, sequence in zip(back, sequences):
        np.testing.assert_array_equal(sample["input_ids"], sequence.input_ids)
        np.testing.assert_array_equal(sample["positions"], sequence.positions)
        assert sample["images"] == list(sequence.images)
        assert sample["json"]["documents"] == list(sequence.documents)


def test_shard_pattern_is_brace_notation():
    assert shards.shard_pattern("mmc4", 42) == "mmc4-{000000..000041}.tar"
    assert shards.shard_pattern("mmc4", 1) == "mmc4-000000.tar"
