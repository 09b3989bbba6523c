"""One attempt at one URL, against a real loopback server."""

from __future__ import annotations

import dataclasses
import os

import pytest

from corpora import __version__
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
        (["noml"], True),
        (["corpora: noml"], True),
        (["otherbot: noml"], False),
        ([], False),
    ],
)
def test_opted_out(tags, expected):
    assert opted_out(tags) is expected


def test_user_agent_is_sent_with_the_corpora_token_and_the_contact(server):
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
    default = dataclasses.replace(FAST, contact="mailto:crawl@lab.example")
    assert once(server.url("/ua"), default).data
    assert seen == [
        f"mybot/1.0 (+https://example.org/bot) corpora/{__version__}",
        f"corpora/{__version__} (multimodal corpus builder; honours robots.txt; "
        "+mailto:crawl@lab.example)",
    ]


def test_tdm_reservation_and_noml_end_before_the_body(server):
    def reserved(handler, headers):
        handler.send_body(200, image_bytes(8, 8, "r"), "image/jpeg", headers)

    server.route("/tdm", lambda handler: reserved(handler, {"tdm-reservation": "1"}))
    server.route("/tdm0", lambda handler: reserved(handler, {"tdm-reservation": "0"}))
    server.route("/noml", lambda handler: reserved(handler, {"X-Robots-Tag": "noml"}))
    assert once(server.url("/tdm")).reason == "tdm_reserved"
    assert once(server.url("/tdm0")).data
    assert once(server.url("/noml")).reason == "opted_out"
    ignoring = dataclasses.replace(FAST, respect_opt_out=False)
    assert once(server.url("/tdm"), ignoring).data and once(server.url("/noml"), ignoring).data


def test_a_robots_request_keeps_the_first_500_kib_and_skips_the_opt_outs(server):
    text = b"User-agent: *\nDisallow: /x\n" + b"#" * (600 << 10)
    server.route(
        "/robots.txt",
        lambda handler: handler.send_body(200, text, "text/plain", {"X-Robots-Tag": "noai"}),
    )
    pool = ConnectionPool(1)
    try:
        got = attempt(server.url("/robots.txt"), FAST, pool, DnsCache(), policy_file=True)
    finally:
        pool.close()
    assert got.reason is None and got.data == text[: 512 << 10]


def test_file_urls_and_paths_under_an_allowed_directory(tmp_path):
    path = tmp_path / "a.jpg"
    path.write_bytes(image_bytes(40, 40, "file"))
    allowed = dataclasses.replace(FAST, allow_local_files=(str(tmp_path),))
    assert once(path.as_uri(), allowed).data == once(str(path), allowed).data == path.read_bytes()
    assert once(f"file://localhost{path}", allowed).data == path.read_bytes()
    assert once((tmp_path / "missing.jpg").as_uri(), allowed).reason == "file_not_found"
    too_small = dataclasses.replace(allowed, max_bytes=10)
    assert once(path.as_uri(), too_small).reason == "too_large"
    assert once(str(path / "b.jpg"), allowed).reason == "file_error"  # a.jpg is no directory


# Issue 16, defect 1: any file:// URL or plain path read a local file, whatever its host,
# wherever it was; /dev/zero ignored --max-image-bytes and a FIFO hung the build.
def test_local_files_are_refused_by_default(tmp_path):
    path = tmp_path / "a.jpg"
    path.write_bytes(image_bytes(40, 40, "file"))
    for url in (path.as_uri(), str(path), "file:///etc/passwd", "file:///dev/zero"):
        result = once(url)
        assert (result.reason, result.data) == ("local_file", None), url


@pytest.mark.parametrize("host", ["127.0.0.1", "evil.example", "localhost:22"])
def test_a_file_url_with_a_host_is_refused(tmp_path, host):
    path = tmp_path / "a.jpg"
    path.write_bytes(image_bytes(40, 40, "file"))
    allowed = dataclasses.replace(FAST, allow_local_files=(str(tmp_path),))
    result = once(f"file://{host}{path}", allowed)
    assert result.reason == "local_file" and host in result.detail


def test_only_regular_files_under_the_allowed_directories_are_read(tmp_path):
    inside, outside = tmp_path / "images", tmp_path / "private"
    inside.mkdir(), outside.mkdir()
    (outside / "secret.jpg").write_bytes(image_bytes(8, 8, "secret"))
    (inside / "link.jpg").symlink_to(outside / "secret.jpg")
    fifo = inside / "fifo.jpg"
    os.mkfifo(fifo)  # opening it for reading would wait for a writer for ever
    (inside / "zero.jpg").symlink_to("/dev/zero")
    allowed = dataclasses.replace(FAST, allow_local_files=(str(inside.resolve()),))
    urls = {
        "outside": (outside / "secret.jpg").as_uri(),
        "link out": (inside / "link.jpg").as_uri(),
        "dot-dot": f"{inside}/../private/secret.jpg",
        "fifo": fifo.as_uri(),
        "device": str(inside / "zero.jpg"),  # resolves outside: refused before it is opened
        "directory": inside.as_uri(),
    }
    results = {name: once(url, allowed) for name, url in urls.items()}
    assert {name: r.reason for name, r in results.items()} == dict.fromkeys(urls, "local_file")
    assert "not a regular file" in results["fifo"].detail
    devices = dataclasses.replace(FAST, allow_local_files=("/dev",), max_bytes=1000)
    assert once("file:///dev/zero", devices).reason == "local_file"


def test_raw_non_ascii_and_spaces_are_percent_encoded_and_bad_urls_named(server):
    assert once(server.url("/img/20x20/café au lait.jpg")).data
    assert "/img/20x20/caf%C3%A9%20au%20lait.jpg" in server.requests
    assert once(f"http://127.0.0.1:{server.port}0000/x.jpg").reason == "bad_url"
    assert once("http:///nohost.jpg").reason == "bad_url"


@pytest.mark.parametrize("url", ["ftp://127.0.0.1/image.jpg", "gopher://example.com/x"])
def test_other_schemes_are_refused(url):
    assert once(url).reason == "bad_scheme"


def test_a_local_file_read_past_the_total_timeout_is_a_timeout(tmp_path):
    path = tmp_path / "slow.jpg"
    path.write_bytes(b"\xff" * 200_000)  # read in 64 KiB chunks
    ticks = iter(range(0, 1000, 30))  # the clock moves 30 s per look: a slow network disk
    allowed = dataclasses.replace(FAST, allow_local_files=(str(tmp_path),), total_timeout=60)
    pool = ConnectionPool(1)
    result = attempt(str(path), allowed, pool, DnsCache(), clock=lambda: next(ticks))
    assert result.reason == "timeout" and result.data is None
