"""What a store knows about one image URL, and what a build does about it.

A lookup answers one of three things:

- :class:`Stored`: the image is in a tar; its :class:`ImageRef` says where
  (tar URL, byte offset and size of the member, SHA-256), which is all the
  shard writer needs for a ranged read.
- :class:`Failed`: an earlier fetch failed, with its reason (a fetch reason,
  ``timeout``, ``http_404``, ``opted_out`` …) and HTTP status. Timeouts,
  connection errors, 5xx, 429 and an unavailable robots.txt are worth
  another try later (``--refetch-failures``), and so are the failures that
  depend on a build's limits or on a robots.txt that may change
  (:data:`RECHECKED`); anything else, opt-outs above all, is final.
- :data:`UNKNOWN`: never fetched, or fetched by a writer that was killed
  before it committed the part: fetch it.

    >>> timeout, opted_out = Failed("u", "timeout"), Failed("u", "opted_out")
    >>> needs_fetch(UNKNOWN), needs_fetch(timeout), needs_fetch(timeout, refetch_failures=True)
    (True, False, True)
    >>> needs_fetch(opted_out, refetch_failures=True), needs_fetch(Failed("u", "http_404"), True)
    (False, False)
    >>> loop = Failed("u", "too_many_redirects")
    >>> needs_fetch(loop), needs_fetch(loop, refetch_failures=True)
    (False, True)

One URL can have several rows (a retry that succeeded, a Beam bundle that
ran twice); :func:`resolve` picks one answer for all of them: the earliest
success (the copy that builds already reference), otherwise the latest
failure.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Union

# Failures that say nothing lasting about the image: a later fetch may succeed.
# A superset of the fetcher's in-build retries, which leave out timeouts (a
# slow host is not retried at once, but may answer another day).
RETRYABLE = frozenset({"timeout", "connection_error", "http_5xx", "http_429", "robots_unavailable"})
# Failures that depend on a build's limits (--allow-network, --max-image-bytes,
# the redirect cap) or on a robots.txt that its host may change: recorded, so a
# rebuild does not ask again, and fetched again with --refetch-failures (a
# robots.txt disallow is checked against robots.txt again first, so no image
# request is made while it still disallows).
RECHECKED = frozenset({"blocked_address", "too_large", "too_many_redirects", "robots_disallowed"})


@dataclasses.dataclass(frozen=True)
class ImageRef:
    """Where an image's bytes are: ``size`` bytes at ``offset`` in the tar at ``tar``."""

    tar: str
    offset: int
    size: int
    sha256: str


@dataclasses.dataclass(frozen=True)
class Stored:
    url: str
    key: str
    ref: ImageRef
    width: int
    height: int
    format: str  # Pillow's name: JPEG, PNG, WEBP, GIF …
    status: int | None = None  # the HTTP status it came with


@dataclasses.dataclass(frozen=True)
class Failed:
    url: str
    reason: str
    status: int | None = None
    detail: str = ""

    @property
    def retryable(self) -> bool:
        return self.reason in RETRYABLE or self.reason in RECHECKED


@dataclasses.dataclass(frozen=True)
class Unknown:
    """Nothing committed about the URL."""


UNKNOWN = Unknown()
Outcome = Union[Stored, Failed]


def needs_fetch(outcome: Stored | Failed | Unknown, refetch_failures: bool = False) -> bool:
    """Whether a build fetches a URL the store answers ``outcome`` for."""
    if isinstance(outcome, Unknown):
        return True
    if isinstance(outcome, Failed):
        return refetch_failures and outcome.retryable
    return False


def resolve(rows: Iterable[tuple[float, Outcome]]) -> Outcome:
    """One outcome from a URL's ``(time recorded, outcome)`` rows.

    >>> ref = ImageRef("a.tar", 512, 10, "00")
    >>> stored = Stored("u", "k", ref, 1, 1, "JPEG")
    >>> resolve([(1.0, Failed("u", "timeout")), (2.0, stored)]).ref.offset
    512
    >>> resolve([(1.0, Failed("u", "timeout")), (3.0, Failed("u", "http_404"))]).reason
    'http_404'
    """
    best_success: tuple | None = None
    last_failure: tuple | None = None
    for when, outcome in rows:
        if isinstance(outcome, Stored):
            rank = (when, outcome.ref.tar, outcome.ref.offset)
            if best_success is None or rank < best_success[0]:
                best_success = (rank, outcome)
        else:
            rank = (when, outcome.reason, outcome.status or 0)
            if last_failure is None or rank > last_failure[0]:
                last_failure = (rank, outcome)
    chosen = best_success or last_failure
    if chosen is None:
        raise ValueError("no rows to resolve")
    return chosen[1]
