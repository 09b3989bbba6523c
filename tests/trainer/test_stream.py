"""Shard streams: split across consumers, endless, bad shards skipped and
counted, resumed exactly from a small state."""

from __future__ import annotations

import collections
import json
import logging
import os
import shutil
import tarfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corpora import reader
from trainer.blend import check_blend, resolve_source
from trainer.loader import sample_check
from trainer.stream import DataError, Shard, ShardStream, split_shards

pytestmark = [pytest.mark.slow, pytest.mark.integration]


@settings(max_examples=200, deadline=None)
@given(shards=st.integers(1, 30), consumers=st.integers(1, 40), per_shard=st.integers(1, 7))
def test_split_shards_gives_every_sample_to_exactly_one_consumer(shards, consumers, per_shard):
    listed = [Shard(f"s{i}.tar") for i in range(shards)]
    owners = collections.Counter()
    for consumer in range(consumers):
        units = split_shards(listed, consumer, consumers)
        assert units, "every consumer gets something to read"
        for unit in units:
            for sample in range(per_shard):
                if sample % unit.parts == unit.part:
                    owners[(unit.url, sample)] += 1
    # every sample of every shard, once; with enough shards, whole shards
    assert sorted(owners) == sorted(
        (f"s{i}.tar", j) for i in range(shards) for j in range(per_shard)
    )
    assert set(owners.values()) == {1}
    if shards >= consumers:
        assert all(
            u.parts == 1 for c in range(consumers) for u in split_shards(listed, c, consumers)
        )


def _shards(location: str) -> list[Shard]:
    return list(resolve_source(location).shards)


def _keys(stream, count: int) -> list[str]:
    return [next(stream).key for _ in range(count)]


def test_a_stream_is_endless_and_reads_every_sample_once_per_pass(builds):
    shards = _shards(builds.pairs)
    stream = ShardStream(shards, seed=(3,), shuffle_buffer=0)
    first, second = _keys(stream, 60), _keys(stream, 60)
    assert len(set(first)) == 60 and set(first) == set(second)
    assert first != second  # each pass has its own seeded shard order
    again = ShardStream(shards, seed=(3,), shuffle_buffer=0)
    assert _keys(again, 120) == first + second  # same seed, same stream
    other = ShardStream(shards, seed=(4,), shuffle_buffer=0)
    assert _keys(other, 60) != first


def test_the_shuffle_buffer_mixes_across_shards_and_keeps_every_sample(builds):
    stream = ShardStream(_shards(builds.pairs), seed=(0,), shuffle_buffer=16)
    keys = _keys(stream, 600)  # ten passes
    counts = collections.Counter(keys)
    assert len(counts) == 60 and max(counts.values()) - min(counts.values()) <= 3
    shard_of = [key.rsplit("-", 1)[0] for key in keys[:30]]
    runs = sum(1 for a, b in zip(shard_of, shard_of[1:]) if a != b)
    assert runs > 20  # unshuffled, 3-sample shards would change shard about 10 times


def test_consumers_read_disjoint_samples_even_with_fewer_shards_than_consumers(builds):
    shards = _shards(builds.pairs)[:3]  # 9 samples for 4 consumers: shards are cut in parts
    seen = []
    for consumer in range(4):
        units = split_shards(shards, consumer, 4)
        stream = ShardStream(units, seed=(0, consumer), shuffle_buffer=0)
        count = sum(
            sum(1 for j in range(u.samples) if j % u.parts == u.part)  # type: ignore[arg-type]
            for u in units
        )
        seen.append(set(_keys(stream, count)))
    assert sum(len(s) for s in seen) == 9 and len(set().union(*seen)) == 9


def _copy(build: str, tmp_path) -> str:
    target = str(tmp_path / os.path.basename(build))
    shutil.copytree(build, target)
    return target


def test_truncated_corrupt_and_missing_shards_are_skipped_with_one_line_each(
    builds, tmp_path, caplog
):
    build = _copy(builds.pairs, tmp_path)
    shards = _shards(build)
    truncated, corrupt, missing = shards[2].url, shards[5].url, shards[7].url
    with open(truncated, "r+b") as handle:
        handle.truncate(os.path.getsize(truncated) // 2)
    with open(corrupt, "wb") as handle:
        handle.write(b"this is not a tar file" * 100)
    os.remove(missing)
    with caplog.at_level(logging.WARNING, logger="trainer.data"):
        stream = ShardStream(shards, seed=(1,), shuffle_buffer=0, name="pairs")
        keys = _keys(stream, 3 * 51)  # three passes over 17 good shards
    bad = {os.path.basename(u)[:-4] for u in (truncated, corrupt, missing)}
    # what the truncated shard held before the cut is kept; nothing comes from the others
    from_bad = {k.rsplit("-", 1)[0] for k in keys} & bad
    assert from_bad <= {os.path.basename(truncated)[:-4]}
    assert len({k for k in keys if k.rsplit("-", 1)[0] not in bad}) == 51
    assert stream.counters["shards_skipped"] >= 9  # three shards, three passes
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3 and all(line.startswith("pairs: skipped ") for line in lines)
    assert all("\n" not in line for line in lines)
    assert {line.split()[2].rstrip(":") for line in lines} == {truncated, corrupt, missing}


@pytest.mark.parametrize(
    "cut_before, skipped, message",
    [
        ("input_ids.npy", "shards_skipped", "1 samples, the manifest says 2"),
        ("img000.jpg", "samples_skipped", "24 image slots for 0 images"),
    ],
)
def test_a_shard_cut_at_a_member_boundary_is_caught(
    builds, tmp_path, caplog, cut_before, skipped, message
):
    # Cut between tar members the shard still reads as a valid, shorter tar:
    # before the second sample (one sample short of the manifest's count), or
    # inside it (a sample whose image slots have no images).
    build = _copy(builds.interleaved, tmp_path)
    shards = _shards(build)
    path = shards[0].url
    with tarfile.open(path) as tar:
        members = tar.getmembers()
    cut = next(m for m in members if m.name.endswith(cut_before) and "-000001." in m.name)
    with open(path, "r+b") as handle:
        handle.truncate(cut.offset)
    check = sample_check(check_blend([resolve_source(build)]))  # as the loader checks samples
    with caplog.at_level(logging.WARNING, logger="trainer.data"):
        stream = ShardStream([shards[0], shards[1]], seed=(0,), shuffle_buffer=0, check=check)
        keys = _keys(stream, 3)
    assert stream.counters[skipped] == 1
    assert len(set(keys)) == 3 and "mmc4-000000-000001" not in keys
    assert len(caplog.records) == 1 and message in caplog.records[0].getMessage()


def test_verify_skips_a_shard_whose_bytes_differ_from_the_manifest(builds, tmp_path, caplog):
    build = _copy(builds.pairs, tmp_path)
    shards = _shards(build)
    path = shards[0].url
    with tarfile.open(path) as tar:
        image = next(m for m in tar.getmembers() if m.name.endswith(".jpg"))
    with open(path, "r+b") as handle:  # one byte inside a JPEG: the tar still reads
        handle.seek(image.offset_data + 100)
        byte = handle.read(1)
        handle.seek(image.offset_data + 100)
        handle.write(bytes([byte[0] ^ 0xFF]))
    plain = ShardStream(shards[:2], seed=(0,), shuffle_buffer=0)
    assert len(set(_keys(plain, 6))) == 6  # without verify the damage goes unseen
    with caplog.at_level(logging.WARNING, logger="trainer.data"):
        checked = ShardStream(shards[:2], seed=(0,), shuffle_buffer=0, verify=True)
        keys = _keys(checked, 9)
    assert {k.rsplit("-", 1)[0] for k in keys} == {os.path.basename(shards[1].url)[:-4]}
    assert checked.counters["shards_skipped"] >= 2
    assert len(caplog.records) == 1  # verified once, skipped on every pass, warned once
    assert caplog.records[0].getMessage().count(shards[0].url) == 1
    assert "does not match its manifest (ShardMismatch: sha256 " in caplog.records[0].getMessage()


def test_verify_makes_the_check_of_corpora_stats_a_shard_cut_short_is_skipped(
    builds, tmp_path, caplog
):
    build = _copy(builds.pairs, tmp_path)
    shards = _shards(build)
    entry = reader.load_manifest(build)["shards"][0]
    assert shards[0].entry == {k: entry[k] for k in ("samples", "sha256", "bytes")}
    path = shards[0].url
    with tarfile.open(path) as tar:
        last = tar.getmembers()[-1].name.split(".", 1)[0]
        cut = next(m for m in tar.getmembers() if m.name.split(".", 1)[0] == last)
    with open(path, "r+b") as handle:  # at a member boundary: the tar still reads
        handle.truncate(cut.offset)
    with caplog.at_level(logging.WARNING, logger="trainer.data"):
        checked = ShardStream(shards[:2], seed=(0,), shuffle_buffer=0, verify=True)
        keys = _keys(checked, 3)
    assert {k.rsplit("-", 1)[0] for k in keys} == {os.path.basename(shards[1].url)[:-4]}
    size = os.path.getsize(path)
    assert f"(ShardMismatch: {size} bytes, the manifest says {entry['bytes']})" in (
        caplog.records[0].getMessage()
    )


def test_a_stream_with_no_readable_shard_raises_instead_of_spinning(tmp_path):
    bad = tmp_path / "x-000000.tar"
    bad.write_bytes(b"junk")
    stream = ShardStream([Shard(str(bad)), Shard(str(tmp_path / "gone.tar"))], name="junk")
    with pytest.raises(DataError, match="junk: none of its 2 shard"):
        next(stream)


def test_resume_from_the_state_gives_the_same_next_samples(builds):
    shards = _shards(builds.interleaved)
    stream = ShardStream(shards, seed=(5, 1), shuffle_buffer=7)
    for _ in range(31):  # into the second pass, mid-shard
        next(stream)
    state = json.loads(json.dumps(stream.state_dict()))  # plain JSON: fits any checkpoint
    assert len(state["buffer"]) == 7
    expected = [next(stream) for _ in range(40)]
    resumed = ShardStream(shards, seed=(5, 1), shuffle_buffer=7)
    resumed.load_state_dict(state)
    got = [next(resumed) for _ in range(40)]
    assert [s.key for s in got] == [s.key for s in expected]
    for a, b in zip(got, expected):
        assert a.input_ids.tobytes() == b.input_ids.tobytes() and a.images == b.images


def test_iter_samples_is_what_the_stream_reads(builds):
    # one pass unshuffled is the reader's samples, shard by shard in the pass's order
    shards = _shards(builds.pairs)
    stream = ShardStream(shards, seed=(2,), shuffle_buffer=0)
    keys = _keys(stream, 60)
    order = []
    for key in keys:
        shard = key.rsplit("-", 1)[0]
        if not order or order[-1] != shard:
            order.append(shard)
    expected = [
        s.key
        for name in order
        for s in reader.iter_samples(os.path.join(builds.pairs, name + ".tar"))
    ]
    assert keys == expected
