import io
import pathlib

import pytest
from PIL import Image

from corpora.fetch import FetchSettings, address_is_public, fetch_image, fetch_url, process_image
from tests.servers import image_bytes

LOCAL = FetchSettings(image_size=32, allow_private_urls=True)


@pytest.mark.parametrize("address, public", [
    ("93.184.216.34", True),
    ("127.0.0.1", False),
    ("10.1.2.3", False),
    ("192.168.0.1", False),
    ("172.16.5.4", False),
    ("169.254.169.254", False),  # cloud metadata
    ("224.0.0.1", False),
    ("::1", False),
    ("fe80::1", False),
    ("::ffff:127.0.0.1", False),
    ("2606:4700::1111", True),
])
def test_address_safety(address, public):
    assert address_is_public(address) is public


def test_http_image_is_fetched_and_resized_center_crop(image_server):
    fetched, image = fetch_image(image_server.url("/img/64x48/a.jpg"), LOCAL)
    assert fetched.ok and fetched.status == 200
    assert image.reason is None and (image.width, image.height) == (32, 32)
    assert (image.original_width, image.original_height) == (64, 48)
    assert Image.open(io.BytesIO(image.data)).format == "JPEG"


def test_png_is_reencoded_as_jpeg(image_server):
    _, image = fetch_image(image_server.url("/png/40x40/b.png"), LOCAL)
    assert Image.open(io.BytesIO(image.data)).format == "JPEG"


@pytest.mark.parametrize("path, reason", [
    ("/status/404", "http_404"),
    ("/status/500", "http_5xx"),
    ("/status/403", "http_403"),
])
def test_http_errors_have_their_own_reason(image_server, path, reason):
    assert fetch_url(image_server.url(path), LOCAL).reason == reason


def test_html_is_not_an_image(image_server):
    fetched, image = fetch_image(image_server.url("/text/page"), LOCAL)
    assert fetched.ok and image.reason == "not_image"


def test_loopback_is_refused_before_any_request_unless_allowed(image_server):
    before = len(image_server.requests)
    result = fetch_url(image_server.url("/img/8x8/guarded.jpg"), FetchSettings())
    assert result.reason == "blocked_address"
    assert len(image_server.requests) == before


def test_unsupported_scheme_is_refused():
    assert fetch_url("ftp://example.org/a.jpg", LOCAL).reason == "bad_scheme"
    assert fetch_url("data:image/png;base64,AAAA", LOCAL).reason == "bad_scheme"


def test_file_urls_and_local_paths(tmp_path: pathlib.Path):
    path = tmp_path / "photo.jpg"
    path.write_bytes(image_bytes(20, 10, "x"))
    assert fetch_url(path.as_uri(), LOCAL).data == path.read_bytes()
    assert fetch_url(str(path), LOCAL).data == path.read_bytes()
    assert fetch_url((tmp_path / "missing.jpg").as_uri(), LOCAL).reason == "file_not_found"


def test_truncated_and_empty_bodies_are_named():
    assert process_image(b"", LOCAL).reason == "empty_body"
    assert process_image(image_bytes(50, 50, "t")[:40], LOCAL).reason in ("decode_error", "not_image")
