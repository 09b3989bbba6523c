"""One attempt at one URL, against a real loopback server."""

from __future__ import annotations

import dataclasses

import pytest

from corpora.fetch.attempt import Attempt, attempt, opted_out
from corpora.fetch.connections import ConnectionPool, DnsCache
from tests.corpora.fetch.common import FAST
from tests.servers import image_bytes

pytestmark = pytest.mark.timeout(60)


def once(url: str, settings=FAST) -> Attempt:
    pool = ConnectionPool(1)
    try:
        return attempt(url, settings, pool, DnsCache())
    finally:
        pool.close()


def test_a_body_comes_back_whole(server):
    result = once(server.url("/img/30x20/a.jpg"))
    assert (result.reason, result.status) == (None, 200)
    assert result.data == image_bytes(30, 20, "a.jpg")


def test_a_redirect_is_returned_not_followed(server):
    result = once(server.url("/redirect?to=/img/8x8/b.jpg"))
    assert (result.reason, result.status, result.location) == (None, 302, "/img/8x8/b.jpg")
    assert server.requests == ["/redirect?to=/img/8x8/b.jpg"]


@pytest.mark.parametrize(
    "path, reason, status",
    [
        ("/status/404", "http_404", 404),
        ("/status/500", "http_5xx", 500),
        ("/always/429", "http_429", 429),
    ],
)
def test_statuses_are_named(server, path, reason, status):
    result = once(server.url(path))
    assert (result.reason, result.status) == (reason, status)


def test_retry_after_is_read_from_the_answer(server):
    result = once(server.url("/always/503"))
    assert (result.reason, result.retry_after) == ("http_5xx", 1.0)


def test_total_timeout_stops_a_drip_that_beats_the_read_timeout(server):
    # A byte every 0.1 s never trips the 2 s read timeout, and the whole drip
    # takes 100 s: a timeout here is the total cutting it short.
    settings = dataclasses.replace(FAST, read_timeout=2, total_timeout=0.5)
    assert once(server.url("/drip/0.1/d.jpg"), settings).reason == "timeout"


def test_total_timeout_counts_on_the_injected_clock(server):
    ticks = iter(range(0, 1000, 10))  # every look at the clock: ten seconds later
    pool = ConnectionPool(1)
    result = attempt(
        server.url("/img/8x8/slow-clock.jpg"), FAST, pool, DnsCache(), clock=lambda: next(ticks)
    )
    pool.close()
    assert (result.reason, result.status) == ("timeout", 200)


def test_body_over_the_cap_is_too_large(server):
    settings = dataclasses.replace(FAST, max_bytes=500)
    assert once(server.url("/img/256x256/big.jpg"), settings).reason == "too_large"


def test_opt_out_is_decided_on_the_headers(server):
    # The body follows 3 s after the headers; waiting for it would end in the
    # 0.5 s read timeout, so "opted_out" means it was never waited for.
    assert once(server.url("/noai/n.jpg")).reason == "opted_out"


@pytest.mark.slow
def test_opt_out_can_be_turned_off(server):
    settings = dataclasses.replace(FAST, respect_opt_out=False, read_timeout=5, total_timeout=10)
    assert once(server.url("/noai/n.jpg"), settings).data


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
    assert opted_out(tags) is expected


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
    assert once(server.url("/ua"), settings).data
    assert seen == ["mybot/1.0 (+https://example.org/bot)"]


def test_file_urls_and_paths(tmp_path):
    path = tmp_path / "a.jpg"
    path.write_bytes(image_bytes(40, 40, "file"))
    assert once(path.as_uri()).data == once(str(path)).data == path.read_bytes()
    assert once((tmp_path / "missing.jpg").as_uri()).reason == "file_not_found"
    assert once(path.as_uri(), dataclasses.replace(FAST, max_bytes=10)).reason == "too_large"


def test_raw_non_ascii_and_spaces_are_percent_encoded_and_bad_urls_named(server):
    assert once(server.url("/img/20x20/café au lait.jpg")).data
    assert "/img/20x20/caf%C3%A9%20au%20lait.jpg" in server.requests
    assert once(f"http://127.0.0.1:{server.port}0000/x.jpg").reason == "bad_url"
    assert once("http:///nohost.jpg").reason == "bad_url"


@pytest.mark.parametrize("url", ["ftp://127.0.0.1/image.jpg", "gopher://example.com/x"])
def test_other_schemes_are_refused(url):
    assert once(url).reason == "bad_scheme"
