"""corpora/store/index.py: one outcome per URL, kept on disk."""

from __future__ import annotations

import tracemalloc

from corpora.store.index import StoreIndex
from corpora.store.outcomes import UNKNOWN, Failed, ImageRef, Stored, resolve


def _stored(url: str, tar: str = "/store/a.tar", offset: int = 512) -> Stored:
    return Stored(url, "k" * 32, ImageRef(tar, offset, 10, "ab" * 32), 4, 3, "JPEG", 200)


def test_each_url_gets_what_resolve_picks_among_its_rows():
    rows = [
        (1.0, Failed("a", "timeout", None, "slow")),
        (2.0, _stored("a", offset=1024)),
        (3.0, _stored("a", tar="/store/b.tar")),  # a later copy: the earliest success stays
        (1.0, Failed("b", "timeout")),
        (3.0, Failed("b", "http_404", 404, "gone")),
        (2.0, Failed("b", "http_5xx", 503)),
    ]
    index = StoreIndex(rows)
    for url in ("a", "b"):
        assert index.lookup(url) == resolve([row for row in rows if row[1].url == url])
    assert index.lookup("c") is UNKNOWN
    assert len(index) == 2 and "a" in index and "c" not in index and 3 not in index
    assert index.counts() == {"stored": 1, "failed_retryable": 0, "failed_final": 1}


def test_urls_that_differ_only_in_case_or_encoding_are_different_urls():
    index = StoreIndex()
    urls = ["http://h/a.jpg", "http://h/A.jpg", "http://h/%C3%A9.jpg", "http://h/é.jpg", "\udc80"]
    for number, url in enumerate(urls):
        index.add(1.0, Failed(url, "http_404", 404, str(number)))
    assert [index.lookup(url).detail for url in urls] == ["0", "1", "2", "3", "4"]


def test_python_memory_does_not_grow_with_the_urls_held():
    index = StoreIndex()

    def add(start: int, stop: int) -> None:
        for number in range(start, stop):
            url = f"http://images.example/{number:09d}.jpg"
            index.add(float(number), _stored(url, tar=f"/store/part-{number // 5000}.tar"))

    add(0, 1000)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        add(1000, 21_000)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(index) == 21_000
    assert grown < 20_000 * 8, grown  # a dict of them held about 800 bytes a URL
    assert index.lookup("http://images.example/000020999.jpg").ref.tar == "/store/part-4.tar"
    index.close()
