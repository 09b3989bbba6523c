"""The fetch stage against a real loopback server with one route per fault."""

from __future__ import annotations

import dataclasses
import io
import os
import time

import numpy as np
import pytest
from PIL import Image

from corpora import fetch
from corpora.fetch import FetchSettings, ImageOutcome, fetch_images, process_image
from corpora.record import Document, Drop, ImageChunk, TextChunk
from tests.servers import ImageServer, image_bytes, self_signed_cert

pytestmark = pytest.mark.timeout(60)

# Loopback is let through the guard for these tests only through allow_networks,
# so the guard itself stays on (and refuses every other private address).
FAST = FetchSettings(
    image_size=32,
    allow_networks=("127.0.0.1/32",),
    connect_timeout=2,
    read_timeout=0.5,
    total_timeout=3,
    backoff_base=0.05,
    per_host_rate=0,
)

FAULTS = {
    "/img/100x80/ok.jpg": None,
    "/status/404": "http_404",
    "/status/500": "http_5xx",
    "/retry-after/1/later.jpg": None,  # 429 + Retry-After, then the image
    "/drip/1/drip.jpg": "timeout",
    "/reset/reset.jpg": "connection_error",
    "/truncated/cut.jpg": "decode_error",
    "/text/page": "not_image",
    "/empty/nothing.jpg": "empty_body",
    "/bomb.png": "too_many_pixels",
    "/loop/1": "too_many_redirects",
    "/noai/opted.jpg": "opted_out",
}


@pytest.fixture()
def server():
    with ImageServer() as srv:
        yield srv


@pytest.fixture()
def other_loopback():
    with ImageServer("127.0.0.2") as srv:
        yield srv


def fault_urls(server: ImageServer, other: ImageServer) -> dict[str, str | None]:
    urls = {server.url(path): reason for path, reason in FAULTS.items()}
    urls[server.url("/redirect?to=" + other.url("/img/10x10/elsewhere.jpg"))] = "blocked_address"
    urls[server.url("/redirect?to=http://169.254.169.254/latest/meta-data/")] = "blocked_address"
    urls[server.url("/redirect?to=file:///etc/passwd")] = "bad_redirect"
    urls["ftp://127.0.0.1/image.jpg"] = "bad_scheme"
    urls["gopher://example.com/x"] = "bad_scheme"
    return urls


def test_every_fault_ends_in_its_reason(server, other_loopback):
    urls = fault_urls(server, other_loopback)
    outcomes = fetch_images(urls, FAST)
    assert {url: outcome.reason for url, outcome in outcomes.items()} == urls
    ok = outcomes[server.url("/img/100x80/ok.jpg")]
    assert Image.open(io.BytesIO(ok.data)).size == (32, 32)
    assert (ok.original_width, ok.original_height) == (100, 80)
    assert outcomes[server.url("/retry-after/1/later.jpg")].attempts == 2
    assert outcomes[server.url("/status/500")].attempts == FAST.max_attempts  # 5xx is retried
    assert outcomes[server.url("/status/404")].attempts == 1  # 404 is not
    assert outcomes[server.url("/status/404")].status == 404
    assert other_loopback.requests == []  # the redirect hop was refused before connecting


def test_guard_on_means_the_server_receives_no_request(server, other_loopback):
    settings = dataclasses.replace(FAST, allow_networks=())
    urls = fault_urls(server, other_loopback)
    outcomes = fetch_images(urls, settings)
    assert {o.reason for o in outcomes.values()} == {"blocked_address", "bad_scheme"}
    assert server.requests == [] and other_loopback.requests == []
    assert server.opened == 0


def test_hostname_resolving_to_loopback_is_refused(server):
    outcome = fetch_images([f"http://localhost:{server.port}/img/10x10/a.jpg"], FetchSettings())
    assert next(iter(outcome.values())).reason == "blocked_address"
    assert server.requests == []


def test_allow_private_urls_turns_the_guard_off(server):
    settings = dataclasses.replace(FAST, allow_networks=(), allow_private_urls=True)
    outcome = fetch_images([server.url("/img/10x10/a.jpg")], settings)
    assert next(iter(outcome.values())).ok


def test_retry_after_is_honoured(server):
    started = time.monotonic()
    outcome = fetch_images([server.url("/retry-after/1/x.jpg")], FAST)[
        server.url("/retry-after/1/x.jpg")
    ]
    assert outcome.ok and outcome.attempts == 2
    assert time.monotonic() - started >= 1.0
    assert server.requests.count("/retry-after/1/x.jpg") == 2


def test_retry_after_beyond_the_cap_gives_up_at_once(server):
    settings = dataclasses.replace(FAST, max_retry_after=0.5)
    outcome = fetch_images([server.url("/always/429")], settings)[server.url("/always/429")]
    assert (outcome.reason, outcome.status, outcome.attempts) == ("http_429", 429, 1)


def test_429_is_retried_a_bounded_number_of_times(server):
    settings = dataclasses.replace(FAST, max_attempts=2)
    outcome = fetch_images([server.url("/always/503")], settings)[server.url("/always/503")]
    assert (outcome.reason, outcome.status, outcome.attempts) == ("http_5xx", 503, 2)
    assert server.requests.count("/always/503") == 2


def test_total_timeout_stops_a_drip_that_beats_the_read_timeout(server):
    settings = dataclasses.replace(FAST, read_timeout=2, total_timeout=0.5)
    started = time.monotonic()
    outcome = fetch_images([server.url("/drip/0.1/d.jpg")], settings)[server.url("/drip/0.1/d.jpg")]
    assert outcome.reason == "timeout"
    assert time.monotonic() - started < 2  # not the 100 s the drip would take


def test_body_over_the_cap_is_too_large(server):
    settings = dataclasses.replace(FAST, max_bytes=500)
    url = server.url("/img/256x256/big.jpg")
    assert fetch_images([url], settings)[url].reason == "too_large"


def test_opt_out_is_decided_on_the_headers(server):
    url = server.url("/noai/n.jpg")
    started = time.monotonic()
    assert fetch_images([url], FAST)[url].reason == "opted_out"
    assert time.monotonic() - started < 2.5  # the body comes after 3 s; it is never waited for


@pytest.mark.slow
def test_opt_out_can_be_turned_off(server):
    url = server.url("/noai/n.jpg")
    assert fetch_images(
        [url], dataclasses.replace(FAST, respect_opt_out=False, read_timeout=5, total_timeout=10)
    )[url].ok


@pytest.mark.parametrize(
    "tags, expected",
    [
        (["noai"], True),
        (["noimageai"], True),
        (["noindex, nofollow"], True),
        (["NoImageIndex"], True),
        (["all"], False),
        (["googlebot: noindex"], False),
        (["*: noai"], True),
        (["corpora: noindex"], True),
        (["max-image-preview:large, noai"], True),
        (["unavailable_after: 25 Jun 2010 15:00:00 PST"], False),
        (["nofollow", "noimageai"], True),
        ([], False),
    ],
)
def test_opted_out(tags, expected):
    assert fetch.opted_out(tags) is expected


def test_per_host_concurrency_cap_holds(server):
    settings = dataclasses.replace(
        FAST, concurrency=16, per_host_concurrency=3, read_timeout=5, total_timeout=10
    )
    urls = [server.url(f"/slow/0.5/{i}.jpg") for i in range(9)]  # read_timeout below is 5 s
    outcomes = fetch_images(urls, settings)
    assert all(o.ok for o in outcomes.values())
    assert server.max_active == 3  # reached, never exceeded
    assert server.max_connections <= 3


def test_many_requests_in_flight_and_connections_kept_alive(server):
    import threading

    barrier = threading.Barrier(
        16, timeout=10
    )  # passes only if all 16 requests are in flight together

    def together(handler):
        try:
            barrier.wait()
            handler.send_body(200, image_bytes(8, 8, handler.path), "image/jpeg")
        except threading.BrokenBarrierError:
            handler.send_body(404, b"", "text/plain")

    urls = []
    for i in range(16):
        server.route(f"/together/{i}.jpg", together)
        urls.append(server.url(f"/together/{i}.jpg"))
    settings = dataclasses.replace(
        FAST, concurrency=16, per_host_concurrency=16, read_timeout=15, total_timeout=20
    )
    assert all(o.ok for o in fetch_images(urls, settings).values())
    assert server.max_active == 16
    server.opened = 0
    settings = dataclasses.replace(FAST, per_host_concurrency=1)
    urls = [server.url(f"/img/20x20/{i}.jpg") for i in range(10)]
    assert all(o.ok for o in fetch_images(urls, settings).values())
    assert server.opened == 1  # ten requests over one keep-alive connection


def test_user_agent_is_sent(server):
    seen = []
    server.route(
        "/ua",
        lambda handler: (
            seen.append(handler.headers["User-Agent"]),
            handler.send_body(200, image_bytes(8, 8, "ua"), "image/jpeg"),
        ),
    )
    settings = dataclasses.replace(FAST, user_agent="mybot/1.0 (+https://example.org/bot)")
    assert fetch_images([server.url("/ua")], settings)[server.url("/ua")].ok
    assert seen == ["mybot/1.0 (+https://example.org/bot)"]


def test_file_urls_and_paths(tmp_path):
    path = tmp_path / "a.jpg"
    path.write_bytes(image_bytes(40, 40, "file"))
    urls = [path.as_uri(), str(path), (tmp_path / "missing.jpg").as_uri()]
    outcomes = fetch_images(urls, FAST)
    assert [outcomes[url].reason for url in urls] == [None, None, "file_not_found"]


# ---------------------------------------------------------------- decode and resize


def encode(image: Image.Image, fmt: str, **kwargs) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **kwargs)
    return buffer.getvalue()


def decoded(result) -> np.ndarray:
    assert result.reason is None, result
    return np.asarray(Image.open(io.BytesIO(result.data)).convert("RGB")).astype(int)


NO_RESIZE = dataclasses.replace(FAST, resize_mode="no")


def test_exif_orientation_is_applied():
    image = Image.new("RGB", (40, 20), (200, 0, 0))
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90° clockwise on display
    result = process_image(encode(image, "JPEG", exif=exif), NO_RESIZE)
    assert (result.width, result.height) == (20, 40)


def test_cmyk_jpeg_becomes_rgb():
    image = Image.new("CMYK", (16, 16), (0, 255, 255, 0))  # red in CMYK
    pixel = decoded(process_image(encode(image, "JPEG"), NO_RESIZE))[8, 8]
    assert pixel[0] > 200 and pixel[1] < 60 and pixel[2] < 60


def test_palette_with_transparency_and_alpha_are_matted_on_white():
    palette = Image.new("P", (16, 16), 0)
    palette.putpalette([0, 0, 255] + [0, 0, 0] * 255)
    rgba = Image.new("RGBA", (16, 16), (255, 0, 0, 0))  # fully transparent red

    def centre(data: bytes) -> list[int]:
        return decoded(process_image(data, NO_RESIZE))[8, 8].tolist()

    assert centre(encode(palette, "PNG")) == pytest.approx([0, 0, 255], abs=3)  # JPEG is lossy
    assert centre(encode(palette, "PNG", transparency=0)) == pytest.approx([255] * 3, abs=3)
    assert centre(encode(rgba, "PNG")) == pytest.approx([255] * 3, abs=3)


def test_animated_gif_takes_the_first_frame():
    frames = [Image.new("RGB", (16, 16), colour) for colour in ((0, 255, 0), (255, 0, 0))]
    data = encode(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=100)
    pixel = decoded(process_image(data, NO_RESIZE))[8, 8]
    assert pixel[1] > 200 and pixel[0] < 60


def test_size_and_aspect_checks():
    settings = dataclasses.replace(FAST, min_image_size=50, max_aspect_ratio=2.0)
    assert process_image(image_bytes(40, 80, "s"), settings).reason == "too_small"
    assert process_image(image_bytes(300, 100, "a"), settings).reason == "bad_aspect"
    assert process_image(image_bytes(100, 60, "fine"), settings).reason is None


def test_resize_modes_and_quality():
    data = image_bytes(120, 60, "modes")
    sizes = {
        mode: (r.width, r.height)
        for mode in fetch.RESIZE_MODES
        for r in [process_image(data, dataclasses.replace(FAST, resize_mode=mode))]
    }
    assert sizes == {
        "no": (120, 60),
        "border": (32, 32),
        "keep_ratio": (64, 32),
        "keep_ratio_largest": (32, 16),
        "center_crop": (32, 32),
    }
    low = process_image(data, dataclasses.replace(FAST, jpeg_quality=20))
    high = process_image(data, dataclasses.replace(FAST, jpeg_quality=98))
    assert len(low.data) < len(high.data)


def test_settings_reject_bad_values():
    for change in (
        {"resize_mode": "stretch"},
        {"jpeg_quality": 0},
        {"concurrency": 0},
        {"allow_networks": ("not-a-network",)},
        {"max_aspect_ratio": 0.5},
    ):
        with pytest.raises(ValueError):
            dataclasses.replace(FAST, **change)


# ---------------------------------------------------------------- records


def pair(url: str) -> Document:
    return Document("d1", "mmc4-pairs", (ImageChunk(url), TextChunk("a sentence")))


def test_attach_images_drops_a_pair_with_the_image_reason():
    result = fetch.attach_images(
        pair("u"), {"u": ImageOutcome("u", reason="http_404", status=404)}, True
    )
    assert isinstance(result, Drop) and result.reason == "http_404" and result.url == "u"


def test_attach_images_keeps_an_interleaved_document_without_the_image():
    doc = Document("d", "mmc4", (ImageChunk("a"), TextChunk("t"), ImageChunk("b")))
    jpeg = process_image(image_bytes(40, 40, "x"), FAST)
    results = {
        "a": ImageOutcome("a", reason="timeout"),
        "b": ImageOutcome("b", jpeg.data, jpeg.width, jpeg.height, 40, 40, attempts=1),
    }
    out = fetch.attach_images(doc, results, False)
    assert [c.kind for c in out.chunks] == ["text", "image"]
    assert out.chunks[1].width == 32 and out.chunks[1].sha256
    assert out.meta["image_failures"] == [{"url": "a", "reason": "timeout", "status": None}]


def test_select_for_retry():
    assert fetch.select_for_retry(pair("u"), {"u"}).id == "d1"
    dropped = fetch.select_for_retry(pair("v"), {"u"})
    assert isinstance(dropped, Drop) and dropped.reason == "not_in_retry_list"


def test_concurrent_decoding_leaves_stdout_and_stderr_alone():
    # img2dataset's resizer dup2()s /dev/null over fds 1 and 2; from several
    # decode threads at once that used to leave the process silenced for good.
    import concurrent.futures

    data = image_bytes(300, 200, "race")
    before = [os.fstat(fd).st_ino for fd in (1, 2)]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: process_image(data, FAST), range(200)))
    assert all(r.reason is None for r in results)
    assert [os.fstat(fd).st_ino for fd in (1, 2)] == before


def test_a_pooled_connection_the_server_closed_is_replaced_within_the_attempt(server):
    settings = dataclasses.replace(FAST, per_host_concurrency=1)
    urls = [server.url(f"/close/{i}.jpg") for i in range(5)]
    outcomes = fetch_images(urls, settings)
    assert [(outcomes[u].reason, outcomes[u].attempts) for u in urls] == [(None, 1)] * 5
    assert server.opened == 5  # each stale connection was noticed and replaced


def test_per_host_rate_spaces_request_starts(server):
    settings = dataclasses.replace(FAST, concurrency=16, per_host_concurrency=16, per_host_rate=5)
    urls = [server.url(f"/img/8x8/{i}.jpg") for i in range(10)]
    assert all(o.ok for o in fetch_images(urls, settings).values())
    times = sorted(server.request_times)
    # five start at once (one second's worth), the next five 0.2 s apart: the last about 1 s after the first
    assert times[-1] - times[0] >= 0.8


def test_https_with_an_untrusted_certificate_is_a_tls_error(tmp_path):
    with ImageServer(tls=self_signed_cert(str(tmp_path))) as https:
        url = https.url("/img/8x8/a.jpg")
        assert url.startswith("https://")
        assert fetch_images([url], FAST)[url].reason == "tls_error"


def test_https_to_the_pinned_address_verifies_the_host(tmp_path, monkeypatch):
    import ssl

    cert, key = self_signed_cert(str(tmp_path))
    monkeypatch.setattr(
        fetch, "_SSL_CONTEXT", ssl.create_default_context(cafile=cert)
    )  # trust the test CA
    with ImageServer(tls=(cert, key)) as https:
        url = https.url("/img/40x30/secure.jpg")
        outcome = fetch_images([url], FAST)[url]
        assert outcome.ok and (outcome.original_width, outcome.original_height) == (40, 30)


def test_raw_non_ascii_and_spaces_are_percent_encoded_and_bad_urls_named(server):
    good = server.url("/img/20x20/café au lait.jpg")
    bad_port = f"http://127.0.0.1:{server.port}0000/x.jpg"
    outcomes = fetch_images([good, bad_port, "http:///nohost.jpg"], FAST)
    assert outcomes[good].ok
    assert "/img/20x20/caf%C3%A9%20au%20lait.jpg" in server.requests
    assert (
        outcomes[bad_port].reason == "bad_url"
        and outcomes["http:///nohost.jpg"].reason == "bad_url"
    )


def test_corrupt_image_data_is_a_decode_error():
    data = bytearray(image_bytes(64, 64, "corrupt", "PNG"))
    start = data.index(b"IDAT") + 4
    data[start : start + 40] = b"\x55" * 40  # wreck the compressed pixels (and the chunk's CRC)
    result = process_image(bytes(data), FAST)
    assert result.reason == "decode_error" and result.detail


def test_docstring_examples():
    import doctest

    assert doctest.testmod(fetch).failed == 0


def test_docs_list_every_reason():
    import re

    from tests.helpers import REPO

    with open(os.path.join(REPO, "docs", "fetch.md"), encoding="utf-8") as handle:
        table = [line for line in handle if line.startswith("| `")]
    documented = {
        name for line in table for name in re.findall(r"`([a-z_0-9]+)`", line.split("|")[1])
    }
    assert set(fetch.REASONS) <= documented
    assert {r for r in FAULTS.values() if r} <= documented


@pytest.mark.parametrize(
    "address, public",
    [
        ("93.184.216.34", True),
        ("127.0.0.1", False),
        ("10.1.2.3", False),
        ("192.168.0.1", False),
        ("172.16.5.4", False),
        ("169.254.169.254", False),  # the cloud metadata address
        ("224.0.0.1", False),
        ("::1", False),
        ("fe80::1", False),
        ("::ffff:127.0.0.1", False),
        ("2606:4700::1111", True),
    ],
)
def test_address_safety(address, public):
    assert fetch.address_is_public(address) is public
