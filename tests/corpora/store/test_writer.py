"""The store writer: WebDataset parts with exact offsets, rotation, outcomes
named as the fetch stage names them, nothing committed from a failed block."""

from __future__ import annotations

import hashlib
import io
import itertools
import json
import os
import tarfile

import pyarrow.parquet as pq
import pytest
import webdataset as wds
from PIL import Image

from corpora.fetch import FetchSettings, process_image
from corpora.store import (
    UNKNOWN,
    Failed,
    ImageStore,
    Stored,
    StoreError,
    StoreSpec,
    identify,
)
from tests.servers import image_bytes, png_header_bomb

SPLIT = "docs-00000.jsonl"


def _split_dir(store: ImageStore) -> str:
    return os.path.join(store.root, "splits", SPLIT)


def _ticks():
    counter = itertools.count(1)
    return lambda: float(next(counter))


def test_parts_are_webdataset_tars_with_the_recorded_offsets(tmp_path):
    store = ImageStore.open(str(tmp_path / "store"))
    bodies = {
        "https://a.example/1.jpg": image_bytes(40, 30, "one"),
        "https://a.example/2.png": image_bytes(20, 50, "two", "PNG"),
    }
    with store.writer(SPLIT, clock=_ticks()) as writer:
        outcomes = [writer.add(url, body, status=200) for url, body in bodies.items()]
        failed = writer.add_failure(
            "https://b.example/3.jpg", "http_5xx", 503, "Service Unavailable"
        )
    assert [o.format for o in outcomes] == ["JPEG", "PNG"]
    assert [(o.width, o.height) for o in outcomes] == [(40, 30), (20, 50)]
    assert failed == Failed("https://b.example/3.jpg", "http_5xx", 503, "Service Unavailable")

    (part,) = store.parts(SPLIT)
    tar_path = os.path.join(_split_dir(store), part + ".tar")
    with open(tar_path, "rb") as handle:
        raw = handle.read()
    for outcome, body in zip(outcomes, bodies.values()):
        assert outcome.ref.tar == tar_path
        assert raw[outcome.ref.offset : outcome.ref.offset + outcome.ref.size] == body
        assert outcome.ref.sha256 == hashlib.sha256(body).hexdigest()

    samples = list(wds.WebDataset(tar_path, shardshuffle=False))
    assert [s["__key__"] for s in samples] == [o.key for o in outcomes]
    assert samples[0]["jpg"] == bodies["https://a.example/1.jpg"]
    assert samples[1]["png"] == bodies["https://a.example/2.png"]
    about = json.loads(samples[1]["json"])
    assert about == {
        "url": "https://a.example/2.png",
        "sha256": outcomes[1].ref.sha256,
        "width": 20,
        "height": 50,
    }
    with tarfile.open(tar_path) as tar:
        assert {(m.mtime, m.mode, m.uid) for m in tar.getmembers()} == {(0, 0o444, 0)}

    rows = pq.read_table(os.path.join(_split_dir(store), part + ".parquet")).to_pylist()
    assert [r["status"] for r in rows] == ["success", "success", "failed"]
    assert [r["time"] for r in rows] == [1.0, 2.0, 3.0]
    assert rows[2]["reason"] == "http_5xx" and rows[2]["http_status"] == 503
    assert (
        rows[0]["member"] == f"{outcomes[0].key}.jpg"
        and rows[0]["offset"] == outcomes[0].ref.offset
    )


def test_parts_rotate_by_images_and_by_bytes(tmp_path):
    store = ImageStore.open(str(tmp_path / "store"))
    with store.writer(SPLIT, max_part_images=3) as writer:
        for i in range(7):
            writer.add(f"https://a.example/{i}.jpg", image_bytes(16, 16, str(i)))
    assert writer.committed == store.parts(SPLIT)
    sizes = [
        pq.read_metadata(os.path.join(_split_dir(store), p + ".parquet")).num_rows
        for p in store.parts(SPLIT)
    ]
    assert sizes == [3, 3, 1]

    with store.writer("big.jsonl", max_part_bytes=1) as writer:  # every image fills a part
        for i in range(3):
            writer.add(f"https://b.example/{i}.jpg", image_bytes(16, 16, str(i)))
    assert len(store.parts("big.jsonl")) == 3


def test_a_split_of_failures_only_still_commits_its_outcomes(tmp_path):
    store = ImageStore.open(str(tmp_path / "store"))
    with store.writer(SPLIT) as writer:
        writer.add_failure("https://a.example/x.jpg", "opted_out", 200)
    index = store.index()
    assert index.lookup("https://a.example/x.jpg") == Failed(
        "https://a.example/x.jpg", "opted_out", 200
    )


BODIES = {
    "empty": b"",
    "html": b"<html><body>not an image</body></html>",
    "bomb": png_header_bomb(),
    "truncated jpeg": image_bytes(256, 256, "t")[:1200],  # the header is whole, the scan is not
    "jpeg": image_bytes(64, 48, "j"),
}


@pytest.mark.parametrize("name", sorted(BODIES))
def test_bodies_are_named_as_a_direct_fetch_names_them(tmp_path, name):
    """Whatever the store records for a body, a build from the store ends
    where the fetch stage ends with the same body."""
    body = BODIES[name]
    store = ImageStore.open(str(tmp_path / "store"))
    with store.writer(SPLIT) as writer:
        outcome = writer.add("https://a.example/x", body)
    direct = process_image(body, FetchSettings(image_size=32))
    if isinstance(outcome, Failed):
        assert outcome.reason == direct.reason
        assert identify(body) == direct.reason
    else:
        assert isinstance(outcome, Stored)  # stored as sent: the resize decides later
        assert (outcome.width, outcome.height) == Image.open(io.BytesIO(body)).size
    assert {name: isinstance(outcome, Stored)} == {name: name in ("jpeg", "truncated jpeg")}


def test_a_resized_store_keeps_the_shorter_side_at_its_size_and_never_enlarges(tmp_path):
    store = ImageStore.open(str(tmp_path / "store"), StoreSpec(image_size=48))
    with store.writer(SPLIT) as writer:
        large = writer.add("https://a.example/large.png", image_bytes(200, 100, "l", "PNG"))
        small = writer.add("https://a.example/small.jpg", image_bytes(30, 20, "s"))
        bad = writer.add("https://a.example/bad.jpg", b"nope")
    assert (large.format, large.width, large.height) == ("JPEG", 96, 48)
    assert (small.width, small.height) == (30, 20)
    assert bad.reason == "not_image"
    store.spec.check_image_size(48)
    with pytest.raises(StoreError, match="cannot serve --image-size 64"):
        store.spec.check_image_size(64)


def test_a_block_that_raises_commits_nothing_of_its_open_part(tmp_path):
    store = ImageStore.open(str(tmp_path / "store"))
    with pytest.raises(RuntimeError):
        with store.writer(SPLIT, max_part_images=2) as writer:
            for i in range(3):
                writer.add(f"https://a.example/{i}.jpg", image_bytes(16, 16, str(i)))
            raise RuntimeError("the fetch stage failed")
    index = store.index()
    assert isinstance(index.lookup("https://a.example/1.jpg"), Stored)  # its part was full
    assert index.lookup("https://a.example/2.jpg") is UNKNOWN
    assert store.strays(SPLIT) == []  # the open part's temporary file is gone


def test_nothing_is_written_when_nothing_was_added(tmp_path):
    store = ImageStore.open(str(tmp_path / "store"))
    with store.writer(SPLIT) as writer:
        pass
    assert writer.committed == [] and store.state(SPLIT) == "absent"


def test_a_url_parquet_cannot_hold_is_recorded_not_fatal(tmp_path):
    store = ImageStore.open(str(tmp_path / "store"))
    with store.writer(SPLIT) as writer:
        writer.add_failure("https://a.example/\ud800.jpg", "bad_url", detail="\ud800")
        writer.add("https://a.example/ok.jpg", image_bytes(16, 16, "ok"))
    assert isinstance(store.index().lookup("https://a.example/ok.jpg"), Stored)
