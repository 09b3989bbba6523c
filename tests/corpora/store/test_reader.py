"""Reading images back by reference: exact bytes, damage named, and a resize
from the stored original equal to a direct fetch's."""

from __future__ import annotations

import dataclasses
import os
import urllib.request

import pytest

from corpora.fetch import Fetcher, FetchSettings
from corpora.store import ImageReader, ImageStore, StoreError
from tests.servers import image_bytes


def _store(tmp_path, count=6, **options):
    store = ImageStore.open(str(tmp_path / "store"))
    bodies = {}
    with store.writer("a.jsonl", **options) as writer:
        for i in range(count):
            fmt = "PNG" if i % 2 else "JPEG"
            bodies[f"https://h.example/{i}"] = image_bytes(20 + 3 * i, 30, str(i), fmt)
            writer.add(f"https://h.example/{i}", bodies[f"https://h.example/{i}"])
    return store, store.index(), bodies


def test_a_ranged_read_returns_the_original_bytes(tmp_path):
    store, index, bodies = _store(tmp_path, max_part_images=2)
    with ImageReader(max_open=1) as reader:  # every read across parts reopens a tar
        for _ in range(2):
            for url, body in bodies.items():
                assert reader.read(index.lookup(url).ref) == body


def test_a_changed_tar_is_named_not_packed(tmp_path):
    store, index, bodies = _store(tmp_path)
    ref = index.lookup("https://h.example/3").ref
    with open(ref.tar, "r+b") as handle:
        handle.seek(ref.offset + ref.size // 2)
        byte = handle.read(1)
        handle.seek(-1, os.SEEK_CUR)
        handle.write(bytes([byte[0] ^ 0xFF]))
    with ImageReader() as reader:
        with pytest.raises(StoreError, match=f"{ref.tar}: the image at offset {ref.offset}"):
            reader.read(ref)
        assert reader.read(index.lookup("https://h.example/2").ref) == bodies["https://h.example/2"]


def test_a_truncated_or_missing_tar_is_named(tmp_path):
    store, index, bodies = _store(tmp_path)
    last = max((index.lookup(u).ref for u in bodies), key=lambda r: r.offset)
    with open(last.tar, "r+b") as handle:
        handle.truncate(last.offset + 10)
    with ImageReader() as reader:
        with pytest.raises(StoreError, match="the tar is truncated"):
            reader.read(last)
    os.remove(last.tar)
    with ImageReader() as reader:
        with pytest.raises(StoreError, match="cannot open the stored tar"):
            reader.read(last)


@pytest.mark.integration
@pytest.mark.parametrize(
    "settings",
    [
        FetchSettings(image_size=32, resize_mode="center_crop"),
        FetchSettings(image_size=48, resize_mode="border", jpeg_quality=80),
        FetchSettings(image_size=40, resize_mode="keep_ratio", resize_only_if_bigger=True),
    ],
    ids=["center_crop-32", "border-48", "keep_ratio-40"],
)
def test_a_rebuild_from_originals_gives_a_direct_fetchs_bytes(tmp_path, image_server, settings):
    urls = [
        image_server.url("/img/120x80/rebuild-a.jpg"),
        image_server.url("/png/50x90/rebuild-b.png"),
        image_server.url("/img/33x31/rebuild-c.jpg"),
    ]
    store = ImageStore.open(str(tmp_path / "store"))
    with store.writer("a.jsonl") as writer:
        for url in urls:
            with urllib.request.urlopen(url) as response:  # the body as served
                writer.add(url, response.read(), response.status)
    index = store.index()

    with Fetcher(dataclasses.replace(settings, allow_private_urls=True)) as fetcher:
        direct = dict(fetcher.fetch(urls))
    with ImageReader() as reader:
        for url in urls:
            rebuilt = reader.image(index.lookup(url).ref, settings)
            assert rebuilt.reason is None and direct[url].reason is None
            assert rebuilt.data == direct[url].data, url
            assert (rebuilt.width, rebuilt.height) == (direct[url].width, direct[url].height)
