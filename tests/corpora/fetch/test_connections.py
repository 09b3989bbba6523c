from __future__ import annotations

import dataclasses
import ssl

from corpora.fetch import Fetcher, connections
from corpora.fetch.connections import ConnectionPool, DnsCache, PinnedHTTPConnection, Proxies
from tests.corpora.fetch.common import FAST, fetch_all, fetch_one
from tests.servers import ImageServer, ProxyServer, image_bytes, self_signed_cert


def test_dns_answers_are_kept_for_their_ttl():
    now = [0.0]
    answers = iter([["198.51.100.1"], ["198.51.100.2"]])
    lookups = []

    def lookup(host: str, port: int) -> list[str]:
        lookups.append((host, port))
        return next(answers)

    cache = DnsCache(ttl=60, clock=lambda: now[0], lookup=lookup)
    assert cache.resolve("a.example", 80) == ["198.51.100.1"]
    now[0] = 59.9
    assert cache.resolve("a.example", 80) == ["198.51.100.1"]  # the answer the guard checked
    now[0] = 60.0
    assert cache.resolve("a.example", 80) == ["198.51.100.2"]
    assert lookups == [("a.example", 80)] * 2


def test_the_pool_keeps_at_most_its_limit_of_idle_connections_per_key():
    pool = ConnectionPool(max_idle_per_key=1)
    first, second = (PinnedHTTPConnection("h", 80, "192.0.2.1", 1, 1) for _ in range(2))
    pool.put(("http", "h", 80, "192.0.2.1"), first)
    pool.put(("http", "h", 80, "192.0.2.1"), second)  # over the limit: closed, not kept
    assert pool.get(("http", "h", 80, "192.0.2.1")) is first
    assert pool.get(("http", "h", 80, "192.0.2.1")) is None
    assert pool.get(("http", "h", 80, "192.0.2.2")) is None


def test_requests_share_one_keep_alive_connection(server):
    settings = dataclasses.replace(FAST, per_host_concurrency=1)
    urls = [server.url(f"/img/20x20/{i}.jpg") for i in range(10)]
    assert all(o.ok for o in fetch_all(urls, settings).values())
    assert server.opened == 1  # ten requests over one keep-alive connection


def test_a_pooled_connection_the_server_closed_is_replaced_within_the_attempt(server):
    settings = dataclasses.replace(FAST, per_host_concurrency=1)
    urls = [server.url(f"/close/{i}.jpg") for i in range(5)]
    outcomes = fetch_all(urls, settings)
    assert [(outcomes[u].reason, outcomes[u].attempts) for u in urls] == [(None, 1)] * 5
    assert server.opened == 5  # each stale connection was noticed and replaced


def test_a_body_longer_than_its_content_length_ends_the_connection(server):
    """Issue 30, defect 13: the surplus of a response (here a whole second
    response) stayed on the keep-alive connection and was read as the next
    URL's response on that host: the next image silently became the
    attacker's. The connection is closed instead, and the next URL gets its
    own image."""
    evil = image_bytes(24, 24, "evil")
    smuggled = (
        b"HTTP/1.1 200 OK\r\nContent-Type: image/jpeg\r\n"
        + f"Content-Length: {len(evil)}\r\n\r\n".encode()
        + evil
    )

    def smuggle(handler) -> None:
        body = image_bytes(16, 16, "a")
        handler.send_response(200)
        handler.send_header("Content-Type", "image/jpeg")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body + smuggled)  # one write: the surplus is there with the body
        handler.wfile.flush()

    server.route("/smuggle/a.jpg", smuggle)
    settings = dataclasses.replace(FAST, per_host_concurrency=1, concurrency=1)
    first = server.url("/smuggle/a.jpg")
    second = server.url("/img/20x20/b.jpg")
    with Fetcher(settings) as fetcher:
        outcomes = dict(fetcher.fetch([first]))
        outcomes.update(fetcher.fetch([second]))
    assert outcomes[first].ok and outcomes[second].ok
    assert (outcomes[second].original_width, outcomes[second].original_height) == (20, 20)
    assert [r for r in server.requests if r != "/robots.txt"] == [
        "/smuggle/a.jpg",
        "/img/20x20/b.jpg",
    ]
    assert server.opened == 2  # the connection that carried the surplus was not reused


def test_https_with_an_untrusted_certificate_is_a_tls_error(tmp_path):
    with ImageServer(tls=self_signed_cert(str(tmp_path))) as https:
        url = https.url("/img/8x8/a.jpg")
        assert url.startswith("https://")
        assert fetch_one(url).reason == "tls_error"


def test_https_to_the_pinned_address_verifies_the_host(tmp_path, monkeypatch):
    cert, key = self_signed_cert(str(tmp_path))
    monkeypatch.setattr(connections, "SSL_CONTEXT", ssl.create_default_context(cafile=cert))
    with ImageServer(tls=(cert, key)) as https:
        outcome = fetch_one(https.url("/img/40x30/secure.jpg"))
        assert outcome.ok and (outcome.original_width, outcome.original_height) == (40, 30)


# ---------------------------------------------------------------- through a proxy


def test_plain_http_goes_through_the_proxy_in_absolute_form(server):
    urls = [server.url(f"/img/20x20/{i}.jpg") for i in range(3)]
    with ProxyServer() as proxy, Fetcher(FAST, proxies=Proxies({"http": proxy.base})) as fetcher:
        assert all(outcome.ok for _, outcome in fetcher.fetch(urls))
    assert sorted(proxy.requests) == sorted(
        [f"GET {server.url('/robots.txt')}"] + [f"GET {url}" for url in urls]
    )
    assert sorted(server.requests) == sorted(["/robots.txt", "/img/20x20/0.jpg",
                                              "/img/20x20/1.jpg", "/img/20x20/2.jpg"])  # fmt: skip


def test_https_is_tunnelled_to_the_checked_address(tmp_path, monkeypatch):
    cert, key = self_signed_cert(str(tmp_path))
    monkeypatch.setattr(connections, "SSL_CONTEXT", ssl.create_default_context(cafile=cert))
    with ImageServer(tls=(cert, key)) as https, ProxyServer() as proxy:
        url = https.url("/img/40x30/secure.jpg")
        with Fetcher(FAST, proxies=Proxies({"https": proxy.base})) as fetcher:
            outcome = dict(fetcher.fetch([url]))[url]
        assert outcome.ok and (outcome.original_width, outcome.original_height) == (40, 30)
        assert set(proxy.requests) == {f"CONNECT 127.0.0.1:{https.port}"}
        assert https.requests == ["/robots.txt", "/img/40x30/secure.jpg"]


def test_a_private_target_is_refused_before_the_proxy_is_asked():
    urls = ["http://10.1.2.3/a.jpg", "http://169.254.169.254/latest/meta-data/"]
    with ProxyServer() as proxy:
        proxies = Proxies({"http": proxy.base, "https": proxy.base})
        with Fetcher(FAST, proxies=proxies) as fetcher:
            outcomes = dict(fetcher.fetch(urls))
    assert {outcome.reason for outcome in outcomes.values()} == {"blocked_address"}
    assert proxy.requests == []


def test_no_proxy_hosts_are_fetched_directly(server):
    url = server.url("/img/8x8/direct.jpg")
    with ProxyServer() as proxy:
        proxies = Proxies({"http": proxy.base, "no": "127.0.0.1"})
        with Fetcher(FAST, proxies=proxies) as fetcher:
            assert dict(fetcher.fetch([url]))[url].ok
    assert proxy.requests == [] and server.requests == ["/robots.txt", "/img/8x8/direct.jpg"]


def test_a_proxy_that_is_down_leaves_the_host_unreachable_not_fetched_around_it(server):
    with ProxyServer() as proxy:
        dead = proxy.base  # closed: connections to it are refused
    with Fetcher(FAST, proxies=Proxies({"http": dead})) as fetcher:
        url = server.url("/img/8x8/y.jpg")
        outcome = dict(fetcher.fetch([url]))[url]
    assert outcome.reason == "robots_unavailable" and "connection_error" in outcome.detail
    assert server.requests == []
