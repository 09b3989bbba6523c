"""The store on disk: opening it, split states and markers, and what a
writer killed with SIGKILL leaves (nothing a reader trusts)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from corpora.store import (
    UNKNOWN,
    Failed,
    ImageReader,
    ImageStore,
    Stored,
    StoreError,
    StoreSpec,
)
from tests.beam_services import python_env
from tests.servers import image_bytes


def _fill(store: ImageStore, split: str, count: int, **options) -> dict[str, bytes]:
    bodies = {
        f"https://h.example/{split}/{i}.jpg": image_bytes(16 + i, 16, f"{split}{i}")
        for i in range(count)
    }
    with store.writer(split, **options) as writer:
        for url, body in bodies.items():
            writer.add(url, body)
    return bodies


def test_open_creates_the_store_and_refuses_another_spec(tmp_path):
    root = str(tmp_path / "store")
    store = ImageStore.open(root)
    with open(os.path.join(root, "store.json")) as handle:
        description = json.load(handle)
    assert description["images"] == "original" and description["version"] == 1
    assert ImageStore.open(root).spec == StoreSpec()
    asks = "holds original images; this build asks for images resized to 256 px"
    with pytest.raises(StoreError, match=asks):
        ImageStore.open(root, StoreSpec(image_size=256))
    resized = ImageStore.open(str(tmp_path / "small"), StoreSpec(image_size=256))
    assert ImageStore.open(resized.root).spec == StoreSpec(image_size=256)
    assert store.splits() == []


def test_an_img2dataset_download_is_not_taken_for_a_store(tmp_path):
    (tmp_path / "00000.tar").write_bytes(b"")
    (tmp_path / "00000.parquet").write_bytes(b"")
    with pytest.raises(StoreError, match="--images-from"):
        ImageStore.open(str(tmp_path))


def test_states_and_the_marker(tmp_path):
    store = ImageStore.open(str(tmp_path / "store"))
    assert store.state("a.jsonl") == "absent"
    bodies = _fill(store, "a.jsonl", 5, max_part_images=2)
    with store.writer("a.jsonl") as writer:
        writer.add_failure("https://h.example/gone.jpg", "http_404", 404)
        writer.add_failure("https://h.example/slow.jpg", "timeout")
    assert store.state("a.jsonl") == "partial"
    marker = store.mark_complete("a.jsonl")
    assert store.state("a.jsonl") == "complete"
    assert marker == {
        "split": "a.jsonl",
        "parts": store.parts("a.jsonl"),
        "urls": 7,
        "stored": 5,
        "failed_retryable": 1,
        "failed_final": 1,
    }
    assert len(marker["parts"]) == 4
    assert store.stored_bytes("a.jsonl") == sum(len(b) for b in bodies.values())


def test_a_complete_split_trusts_its_marker_parts_only(tmp_path):
    store = ImageStore.open(str(tmp_path / "store"))
    _fill(store, "a.jsonl", 2)
    store.mark_complete("a.jsonl")
    with store.writer("a.jsonl") as writer:  # a duplicate run writing after the marker
        writer.add("https://h.example/late.jpg", image_bytes(8, 8, "late"))
    assert store.index().lookup("https://h.example/late.jpg") is UNKNOWN
    assert len(store.parts("a.jsonl")) == 2 and len(store.trusted_parts("a.jsonl")) == 1

    listed = store.trusted_parts("a.jsonl")[0]
    os.remove(os.path.join(store.root, "splits", "a.jsonl", listed + ".tar"))
    with pytest.raises(StoreError, match=f"marked complete but its part {listed} is missing"):
        store.index()


def test_a_tar_without_its_parquet_is_not_trusted(tmp_path):
    store = ImageStore.open(str(tmp_path / "store"))
    _fill(store, "a.jsonl", 4, max_part_images=2)
    first, second = store.parts("a.jsonl")
    # a writer killed between renaming its tar and writing its parquet
    os.remove(os.path.join(store.root, "splits", "a.jsonl", second + ".parquet"))
    index = store.index()
    assert [index.lookup(f"https://h.example/a.jsonl/{i}.jpg") is UNKNOWN for i in range(4)] == [
        False,
        False,
        True,
        True,
    ]
    assert store.strays("a.jsonl") == [second + ".tar"]
    assert store.remove_strays("a.jsonl") == [second + ".tar"]
    assert store.strays("a.jsonl") == [] and store.parts("a.jsonl") == [first]


_KILLED_WRITER = textwrap.dedent(
    """
    import sys
    from corpora.store import ImageStore
    from tests.servers import image_bytes

    store = ImageStore.open(sys.argv[1])
    with store.writer("done.jsonl") as writer:
        for i in range(3):
            writer.add(f"https://h.example/done/{i}.jpg", image_bytes(20 + i, 20, f"d{i}"))
    store.mark_complete("done.jsonl")
    writer = store.writer("cut.jsonl", max_part_images=4)
    for i in range(int(sys.argv[2])):
        if i == 5:
            writer.add_failure(f"https://h.example/cut/{i}.jpg", "timeout")
        else:
            writer.add(f"https://h.example/cut/{i}.jpg", image_bytes(20 + i, 24, f"c{i}"))
        print(len(writer.committed), flush=True)
    print("waiting", flush=True)
    sys.stdin.read()  # killed here, with a part open
    """
)


def _start_writer(root: str, count: int) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", _KILLED_WRITER, root, str(count)],
        env=python_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def _cut_bodies(count: int) -> dict[str, bytes]:
    return {
        f"https://h.example/cut/{i}.jpg": image_bytes(20 + i, 24, f"c{i}")
        for i in range(count)
        if i != 5
    }


def test_a_writer_killed_with_a_part_open_leaves_only_what_it_committed(tmp_path):
    root = str(tmp_path / "store")
    process = _start_writer(root, 10)
    for line in process.stdout:
        if line.strip() == "waiting":
            break
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert process.returncode == -signal.SIGKILL

    store = ImageStore.open(root)
    assert store.state("done.jsonl") == "complete"
    assert store.state("cut.jsonl") == "partial"
    assert len(store.parts("cut.jsonl")) == 2  # urls 0-3 and 4-7; 8 and 9 were in the open part
    (stray,) = store.strays("cut.jsonl")
    assert ".tar.tmp-" in stray
    index = store.index()
    bodies = _cut_bodies(10)
    with ImageReader() as reader:
        for i in range(10):
            url = f"https://h.example/cut/{i}.jpg"
            found = index.lookup(url)
            if i in (8, 9):
                assert found is UNKNOWN, url
            elif i == 5:
                assert found == Failed(url, "timeout") and found.retryable
            else:
                assert reader.read(found.ref) == bodies[url]
        done = index.lookup("https://h.example/done/2.jpg")
        assert reader.read(done.ref) == image_bytes(22, 20, "d2")

    # resume: fetch only what is unknown, then the split is complete
    with store.writer("cut.jsonl") as writer:
        for url, body in bodies.items():
            if index.lookup(url) is UNKNOWN:
                writer.add(url, body)
    store.remove_strays("cut.jsonl")
    store.mark_complete("cut.jsonl")
    index = store.index(["cut.jsonl"])
    assert index.counts() == {"stored": 9, "failed_retryable": 1, "failed_final": 0}
    with ImageReader() as reader:
        assert {u: reader.read(index.lookup(u).ref) for u in bodies} == bodies


def test_a_writer_killed_at_any_moment_leaves_no_part_that_lies(tmp_path):
    """Killed mid-stream, without a handshake: whatever is committed reads back
    exactly; everything else is unknown."""
    root = str(tmp_path / "store")
    process = _start_writer(root, 60)
    for line in process.stdout:
        if line.strip() == "3":  # three parts committed, the fourth being written
            break
    process.send_signal(signal.SIGKILL)
    process.wait()

    store = ImageStore.open(root)
    index = store.index(["cut.jsonl"])
    bodies = _cut_bodies(60)
    stored = {u for u in bodies if isinstance(index.lookup(u), Stored)}
    assert 12 <= len(stored) + 1 < 60  # at least three parts of four, not all
    assert len(index) % 4 == 0  # whole parts only
    with ImageReader() as reader:
        for url in stored:
            assert reader.read(index.lookup(url).ref) == bodies[url]


def test_a_store_on_an_object_store_works_the_same(tmp_path):
    """Through fsspec (memory://, as gs:// or s3:// would be): committed by a
    copy to the final key, read back by ranged reads."""
    import fsspec

    root = "memory://bucket-store-test/images"
    store = ImageStore.open(root)
    bodies = _fill(store, "a.jsonl", 5, max_part_images=2)
    store.mark_complete("a.jsonl")
    reopened = ImageStore.open(root)
    assert reopened.state("a.jsonl") == "complete"
    index = reopened.index()
    assert {index.lookup(u).ref.tar.split("/")[0] for u in bodies} == {"memory:"}
    with ImageReader() as reader:
        assert {u: reader.read(index.lookup(u).ref) for u in bodies} == bodies
    fs = fsspec.filesystem("memory")
    assert not [p for p in fs.find("/bucket-store-test") if ".tmp-" in p]
    fs.rm("/bucket-store-test", recursive=True)
