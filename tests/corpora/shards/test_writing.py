"""The tar writer: fixed member metadata and order, so equal samples give equal bytes."""

from __future__ import annotations

import hashlib
import io
import re
import tarfile

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from corpora import reader, shards
from corpora.shards import writing
from corpora.tokens import pack
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


# ── the same bytes as tarfile and np.save ────────────────────────────────────


def tarfile_shard(stream, samples) -> None:
    """The writer as it was before issue 17: tarfile's own members."""
    with tarfile.open(fileobj=stream, mode="w|", format=tarfile.USTAR_FORMAT) as tar:
        for key, sequence in samples:
            for extension, data in shards.sample_files(sequence):
                info = tarfile.TarInfo(f"{key}.{extension}")
                info.size = len(data)
                info.mtime = 0
                info.mode = 0o444
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                tar.addfile(info, io.BytesIO(data))


def np_save(array) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


# path components: one name of up to 100 bytes, a prefix/name split, or one too long for USTAR
COMPONENT = st.text("abcXYZ019-_.é", min_size=1, max_size=70)
KEYS = st.lists(COMPONENT, min_size=1, max_size=4).map("/".join)
PAYLOADS = st.binary(max_size=3 * tarfile.BLOCKSIZE + 1)


@st.composite
def sequences(draw) -> pack.PackedSequence:
    seq_len = draw(st.integers(0, 300))
    arrays = [
        np.asarray(
            draw(st.lists(st.integers(-(2**31), 2**31 - 1), min_size=seq_len, max_size=seq_len)),
            np.int32,
        )
        for _ in range(3)
    ]
    images = tuple(draw(st.lists(PAYLOADS, max_size=4)))
    documents = tuple(
        {"id": draw(COMPONENT), "segment": k + 1} for k in range(draw(st.integers(0, 3)))
    )
    return pack.PackedSequence(*arrays, images, documents)


LONG_KEY = "p" * 90 + "/" + "k" * 80  # over 100 bytes: tarfile splits it into prefix and name


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(KEYS, sequences()), max_size=5))
@example([(LONG_KEY, pack.PackedSequence(*[np.arange(5, dtype=np.int32)] * 3, (b"x",), ()))])
@example([("k" * 101, pack.PackedSequence(*[np.arange(5, dtype=np.int32)] * 3, (), ()))])
def test_shard_bytes_equal_tarfiles(samples):
    expected = io.BytesIO()
    try:
        tarfile_shard(expected, samples)
    except ValueError as exc:  # a name USTAR cannot hold: refused the same way
        with pytest.raises(ValueError, match=re.escape(str(exc))):
            shards.write_shard(io.BytesIO(), samples)
        return
    stream = io.BytesIO()
    info = shards.write_shard(stream, samples)
    assert stream.getvalue() == expected.getvalue()
    assert info["bytes"] == len(expected.getvalue()) and len(expected.getvalue()) % 10240 == 0
    assert info["sha256"] == hashlib.sha256(expected.getvalue()).hexdigest()
    assert info["samples"] == len(samples)
    assert info["images"] == sum(len(s.images) for _, s in samples)
    assert info["documents"] == sum(len(s.documents) for _, s in samples)


@settings(max_examples=300, deadline=None)
@given(st.text(min_size=1, max_size=120), st.integers(0, 8**11 + 5))
def test_member_header_equals_tarfiles(name, size):
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode, info.uid, info.gid = size, 0, 0o444, 0, 0
    info.uname = info.gname = ""
    try:
        expected = info.tobuf(tarfile.USTAR_FORMAT, tarfile.ENCODING, "surrogateescape")
    except ValueError as exc:  # a size over 11 octal digits, a name that cannot be split
        with pytest.raises(ValueError, match=re.escape(str(exc))):
            writing.tar_header(name, size)
        return
    assert writing.tar_header(name, size) == expected


@settings(max_examples=100, deadline=None)
@given(hnp.arrays(np.int32, st.integers(0, 3000)))
def test_npy_bytes_equal_np_saves(array):
    assert shards.npy_bytes(array) == np_save(array)


@pytest.mark.parametrize(
    "array",
    [
        np.arange(12, dtype=np.int64),
        np.arange(12, dtype=np.int32).reshape(3, 4),
        np.arange(24, dtype=np.int32)[::2],
        np.arange(12, dtype=">i4"),
        np.arange(12, dtype=np.int32).reshape(3, 4).T,
        np.array([], dtype=np.int32),
    ],
    ids=["int64", "2-D", "strided", "big-endian", "fortran", "empty"],
)
def test_npy_bytes_of_other_arrays_equal_np_saves(array):
    assert shards.npy_bytes(array) == np_save(array)
