"""What the fetch tests share: fast settings and fetching a list of URLs."""

from __future__ import annotations

from typing import Iterable

from corpora.fetch import Fetcher, FetchSettings, ImageOutcome
from corpora.fetch.robots import RobotsBook

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


def fetch_all(urls: Iterable[str], settings: FetchSettings = FAST) -> dict[str, ImageOutcome]:
    """Every URL's outcome, through a short-lived :class:`Fetcher`."""
    with Fetcher(settings) as fetcher:
        return dict(fetcher.fetch(dict.fromkeys(urls)))


def fetch_one(url: str, settings: FetchSettings = FAST) -> ImageOutcome:
    return fetch_all([url], settings)[url]


def knowing(*origins: str, clock=lambda: 0.0) -> RobotsBook:
    """A robots book that has already heard "no robots.txt" (404) from ``origins``."""
    book = RobotsBook(clock=clock)
    for origin in origins:
        book.learn(origin, 404)
    return book
