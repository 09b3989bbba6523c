from __future__ import annotations

import hashlib

from corpora.fetch import ImageOutcome, attach_images, process_image, select_for_retry
from corpora.record import Document, Drop, ImageChunk, TextChunk
from tests.corpora.fetch.common import FAST
from tests.servers import image_bytes


def pair(url: str) -> Document:
    return Document("d1", "mmc4-pairs", (ImageChunk(url), TextChunk("a sentence")))


def test_attach_images_drops_a_pair_with_the_image_reason():
    result = attach_images(pair("u"), {"u": ImageOutcome("u", reason="http_404", status=404)}, True)
    assert isinstance(result, Drop) and result.reason == "http_404" and result.url == "u"


def test_attach_images_keeps_an_interleaved_document_without_the_image():
    doc = Document("d", "mmc4", (ImageChunk("a"), TextChunk("t"), ImageChunk("b")))
    body = image_bytes(40, 40, "x")
    jpeg = process_image(body, FAST)
    outcomes = {"a": ImageOutcome("a", reason="timeout"), "b": jpeg}
    out = attach_images(doc, outcomes, False)
    assert [c.kind for c in out.chunks] == ["text", "image"]
    image = out.chunks[1]
    assert (image.width, image.data, image.meta) == (
        32,
        jpeg.data,
        # the body's sha256, for the exact-duplicate rule (corpora.dedup.images)
        {
            "original_width": 40,
            "original_height": 40,
            "source_sha256": hashlib.sha256(body).hexdigest(),
        },
    )
    assert image.sha256 and out.meta["image_failures"] == [
        {"url": "a", "reason": "timeout", "status": None}
    ]


def test_images_fetched_before_are_left_as_they_are():
    fetched = ImageChunk("a", data=b"jpeg", width=1, height=1, sha256="0" * 64)
    doc = Document("d", "mmc4", (fetched, TextChunk("t")))
    assert attach_images(doc, {}, True) == doc


def test_select_for_retry():
    assert select_for_retry(pair("u"), {"u"}).id == "d1"
    dropped = select_for_retry(pair("v"), {"u"})
    assert isinstance(dropped, Drop) and (dropped.reason, dropped.url) == ("not_in_retry_list", "v")
