"""StoreFetch against the local image server: outcomes equal a direct
fetch's, every outcome kept and never fetched again (a build's limits and
redirect loops included, fetched again only with --refetch-failures),
robots.txt answers kept, --retry-failures' URLs fetched again."""

from __future__ import annotations

import pytest

from corpora.fetch import Fetcher, FetchSettings
from corpora.store import Failed, ImageStore, Stored
from corpora.store.fetching import StoreFetch
from corpora.store.settings import StoreSettings
from tests.servers import ImageServer

SETTINGS = FetchSettings(image_size=24, allow_private_urls=True, max_bytes=20_000)


@pytest.fixture()
def server():
    with ImageServer() as srv:
        yield srv


def _fetch(store: str, wanted: dict[str, str], refetch: bool = False, **options) -> dict:
    with Fetcher(SETTINGS) as fetcher:
        through = StoreFetch(StoreSettings(store, refetch_failures=refetch), fetcher, **options)
        try:
            return {url: (outcome, arrival) for url, outcome, arrival in through.fetch(wanted)}
        finally:
            through.close()


def test_outcomes_are_kept_and_read_back_without_a_request(server, tmp_path):
    store = str(tmp_path / "store")
    ok, gone, page = (server.url(p) for p in ("/img/50x40/a.jpg", "/status/404", "/text/p"))
    big = server.url("/img/900x900/big.jpg")  # over max_bytes here: kept, refetched on request
    wanted = dict.fromkeys((ok, gone, page, big), "docs.jsonl")
    with Fetcher(SETTINGS) as fetcher:
        direct = dict(fetcher.fetch(list(wanted)))
    del server.requests[:]
    first = _fetch(store, wanted)
    assert {url: arrival for url, (_, arrival) in first.items()} == dict.fromkeys(wanted, "fetched")
    index = ImageStore.open(store).index(["docs.jsonl"])
    assert isinstance(index.lookup(ok), Stored)
    assert (index.lookup(gone).reason, index.lookup(page).reason) == ("http_404", "not_image")
    assert index.lookup(big).reason == "too_large"
    assert server.requests.count("/robots.txt") == 1

    del server.requests[:]
    second = _fetch(store, wanted)
    assert server.requests == []  # robots.txt included
    assert {url: arrival for url, (_, arrival) in second.items()} == dict.fromkeys(wanted, "store")
    for url, outcome in direct.items():  # what a direct fetch gives, from the store
        got = second[url][0]
        assert (got.reason, got.data, got.width, got.height) == (
            outcome.reason,
            outcome.data,
            outcome.width,
            outcome.height,
        )

    del server.requests[:]
    third = _fetch(store, {gone: "docs.jsonl", ok: "docs.jsonl"}, again=frozenset({gone}))
    assert server.requests == ["/status/404"]  # asked for again; the stored image is not
    assert third[gone][1] == "fetched" and isinstance(
        ImageStore.open(store).index(["docs.jsonl"]).lookup(gone), Failed
    )


def test_a_redirect_loop_recorded_once_is_not_requested_again(server, tmp_path):
    store = str(tmp_path / "store")
    loop = server.url("/loop/1")
    assert _fetch(store, {loop: "docs.jsonl"})[loop][0].reason == "too_many_redirects"
    assert server.requests.count("/loop/1") == SETTINGS.max_redirects + 1
    del server.requests[:]
    again = _fetch(store, {loop: "docs.jsonl"})
    assert server.requests == [] and again[loop][0].reason == "too_many_redirects"
    assert again[loop][1] == "store"
    _fetch(store, {loop: "docs.jsonl"}, refetch=True)  # a build's limit: asked on request
    assert server.requests.count("/loop/1") == SETTINGS.max_redirects + 1


def test_robots_txt_answers_are_kept_so_a_new_url_of_the_host_asks_no_robots_txt(server, tmp_path):
    server.route(
        "/robots.txt",
        lambda handler: handler.send_body(
            200, b"User-agent: corpora\nDisallow: /private/\n", "text/plain"
        ),
    )
    store = str(tmp_path / "store")
    private, public = server.url("/private/img/8x8/p.jpg"), server.url("/img/8x8/a.jpg")
    first = _fetch(store, {private: "a.jsonl", public: "a.jsonl"})
    assert first[private][0].reason == "robots_disallowed" and first[public][0].ok
    assert server.requests == ["/robots.txt", "/img/8x8/a.jpg"]
    assert ImageStore.open(store).index(["a.jsonl"]).lookup(private).reason == "robots_disallowed"

    del server.requests[:]
    new = server.url("/img/8x8/new.jpg")
    second = _fetch(store, {private: "b.jsonl", new: "b.jsonl"})  # another split: both unknown
    assert second[private][0].reason == "robots_disallowed" and second[new][0].ok
    assert server.requests == ["/img/8x8/new.jpg"]  # the kept robots.txt answered

    del server.requests[:]
    third = _fetch(store, {private: "a.jsonl"}, refetch=True)  # rechecked: robots.txt first
    assert third[private][0].reason == "robots_disallowed" and third[private][1] == "fetched"
    assert server.requests == []  # the kept robots.txt still disallows it: no request
