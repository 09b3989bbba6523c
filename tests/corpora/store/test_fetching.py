"""StoreFetch against the local image server: outcomes equal a direct
fetch's, every outcome kept and never fetched again (a build's limits and
redirect loops included, fetched again only with --refetch-failures),
robots.txt answers kept, --retry-failures' URLs fetched again."""

from __future__ import annotations

import dataclasses
import os

import pytest

from corpora.fetch import Fetcher, FetchSettings
from corpora.store import UNKNOWN, Failed, ImageStore, Stored
from corpora.store.fetching import StoreFetch
from corpora.store.settings import StoreSettings
from tests.servers import ImageServer, image_bytes

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
    big = server.url("/img/900x900/big.jpg")  # over max_bytes here: a refusal of this build
    wanted = dict.fromkeys((ok, gone, page, big), "docs.jsonl")
    with Fetcher(SETTINGS) as fetcher:
        direct = dict(fetcher.fetch(list(wanted)))
    del server.requests[:]
    first = _fetch(store, wanted)
    assert {url: arrival for url, (_, arrival) in first.items()} == dict.fromkeys(wanted, "fetched")
    index = ImageStore.open(store).index(["docs.jsonl"])
    assert isinstance(index.lookup(ok), Stored)
    assert (index.lookup(gone).reason, index.lookup(page).reason) == ("http_404", "not_image")
    assert index.lookup(big) is UNKNOWN  # --max-image-bytes decided it: not kept (issue 32)
    assert server.requests.count("/robots.txt") == 1

    del server.requests[:]
    second = _fetch(store, wanted)
    assert server.requests == ["/img/900x900/big.jpg"]  # robots.txt answered from the store
    assert {url: arrival for url, (_, arrival) in second.items()} == {
        ok: "store",
        gone: "store",
        page: "store",
        big: "fetched",
    }
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


def _outcomes(store: str, wanted: dict[str, str], settings: FetchSettings) -> dict[str, str]:
    with Fetcher(settings) as fetcher:
        through = StoreFetch(StoreSettings(store), fetcher)
        try:
            return {url: outcome.reason or "ok" for url, outcome, _ in through.fetch(wanted)}
        finally:
            through.close()


@pytest.mark.parametrize(
    "refused, reason",
    [
        (dict(allow_local_files=()), "local_file"),
        (dict(allow_private_urls=False), "blocked_address"),
        (dict(max_bytes=100), "too_large"),
    ],
    ids=["--allow-local-files", "--allow-private-urls", "--max-image-bytes"],
)
def test_a_refusal_of_this_build_s_settings_is_not_replayed_to_the_next(
    server, tmp_path, refused, reason
):
    # issue 32, finding 1: a build without the flag, then one with it, into one store
    folder = tmp_path / "images"
    folder.mkdir()
    (folder / "a.jpg").write_bytes(image_bytes(50, 40, "a"))
    url = (folder / "a.jpg").as_uri() if reason == "local_file" else server.url("/img/50x40/a.jpg")
    allowed = dataclasses.replace(SETTINGS, allow_local_files=(os.path.realpath(folder),))
    store, wanted = str(tmp_path / "store"), {url: "docs.jsonl"}
    assert _outcomes(store, wanted, dataclasses.replace(allowed, **refused)) == {url: reason}
    assert ImageStore.open(store).index(["docs.jsonl"]).lookup(url) is UNKNOWN
    assert _outcomes(store, wanted, allowed) == {url: "ok"}


def test_a_settings_refusal_an_older_store_kept_is_fetched_again(server, tmp_path):
    store, url = str(tmp_path / "store"), server.url("/img/50x40/a.jpg")
    with ImageStore.open(store).writer("docs.jsonl") as writer:
        writer.add_failure(url, "blocked_address")
    assert _outcomes(store, {url: "docs.jsonl"}, SETTINGS) == {url: "ok"}
