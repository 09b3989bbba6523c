"""Image fetch: download, check, decode, resize, re-encode.

Every image ends as a success or as exactly one named reason (``http_404``,
``timeout``, ``not_image``, ``blocked_address`` … see :data:`REASONS`).
Nothing here raises for a bad URL or a bad image. One module per job:

- :mod:`~corpora.fetch.settings`: :class:`FetchSettings`, :data:`REASONS`
  and :class:`ImageOutcome`, what each URL ends as;
- :mod:`~corpora.fetch.guard`: which addresses may be connected to;
- :mod:`~corpora.fetch.connections`: connections pinned to the checked
  address, pooled, the DNS answers they were checked against, and the
  proxies they go through;
- :mod:`~corpora.fetch.robots`: robots.txt (RFC 9309), a host's answer as a
  verdict per URL and a ``Crawl-delay``;
- :mod:`~corpora.fetch.tdmrep`: the TDM reservations a host declares in
  ``/.well-known/tdmrep.json`` (W3C TDMRep);
- :mod:`~corpora.fetch.attempt`: one request (opt-out and TDM headers, size
  caps, timeouts, file URLs);
- :mod:`~corpora.fetch.image`: decode, check, resize, re-encode;
- :mod:`~corpora.fetch.politeness`: per-host concurrency, rate, pauses and
  ``Crawl-delay``;
- :mod:`~corpora.fetch.scheduler`: :class:`Fetcher`, many requests in
  flight, each host's robots.txt asked first;
- :mod:`~corpora.fetch.attach`: fetched images into their records;
- :mod:`~corpora.fetch.accounting`: the manifest's ``images`` and
  ``consent`` entries and ``failures.parquet``;
- :mod:`~corpora.fetch.progress`: a worker's progress line.
"""

from corpora.fetch.attach import (
    STORE_SPLIT,
    attach_images,
    select_for_retry,
    store_split,
    without_store_split,
)
from corpora.fetch.attempt import opted_out
from corpora.fetch.guard import address_allowed, address_is_public
from corpora.fetch.image import process_image
from corpora.fetch.scheduler import Fetcher
from corpora.fetch.settings import (
    REASONS,
    RESIZE_MODES,
    USER_AGENT,
    FetchSettings,
    ImageOutcome,
)

__all__ = [
    "REASONS",
    "RESIZE_MODES",
    "STORE_SPLIT",
    "USER_AGENT",
    "FetchSettings",
    "Fetcher",
    "ImageOutcome",
    "address_allowed",
    "address_is_public",
    "attach_images",
    "opted_out",
    "process_image",
    "select_for_retry",
    "store_split",
    "without_store_split",
]
