"""robots.txt (RFC 9309): what a host's answer to ``/robots.txt`` allows.

A host's robots.txt is asked for once, before its first image request, and
its answer becomes a :class:`Robots` verdict that every URL of the host
(scheme, host and port: an *origin*) is checked against:

- a 2xx body is parsed with the RFC's rules (the longest matching path wins,
  ``Allow`` over ``Disallow`` on a tie, the group for our token
  :data:`ROBOTS_TOKEN` or else ``*``; ``Crawl-delay`` is read too) by
  Protego, a maintained parser (the standard library's
  ``urllib.robotparser`` takes the first matching rule instead);
- a 4xx other than 429 (no robots.txt) allows everything;
- a 5xx, a 429 or no answer at all (timeout, refused, reset) disallows
  everything for this build, as ``robots_unavailable``; a host the address
  guard refuses or that does not resolve keeps that reason.

Only the answers that say something lasting (2xx and 4xx) are kept
(:class:`RobotsAnswer`, with the time they were fetched); the scheduler
(:mod:`corpora.fetch.scheduler`) fetches them and the image store keeps
them, so a rebuild asks again only after :data:`MAX_AGE`.

    >>> robots = Robots.from_answer(RobotsAnswer(
    ...     "https://a.example", 200, "User-agent: *\\nDisallow: /private/\\nCrawl-delay: 2\\n"))
    >>> robots.refusal("https://a.example/private/1.jpg"), robots.refusal("https://a.example/1.jpg")
    ('robots_disallowed', None)
    >>> robots.crawl_delay
    2.0
    >>> slow = RobotsAnswer("https://a.example", 200, "User-agent: *\\nCrawl-delay: 86400\\n")
    >>> Robots.from_answer(slow).refusal("https://a.example/1.jpg")
    'robots_disallowed'
    >>> Robots.from_answer(RobotsAnswer("https://a.example", 404)).refusal("https://a.example/x")
    >>> Robots.unavailable("http_5xx", 503).refusal("https://a.example/x")
    'robots_unavailable'
"""

from __future__ import annotations

import dataclasses
import json
import time
import urllib.parse
from typing import Callable, Protocol

from protego import Protego

# The product token robots.txt groups address us by (``User-agent: corpora``).
ROBOTS_TOKEN = "corpora"
# RFC 9309 2.5: parse at least the first 500 KiB; the rest is ignored.
MAX_BYTES = 512 << 10
# RFC 9309 2.4: a cached robots.txt is used for at most 24 hours.
MAX_AGE = 24 * 3600.0
# The longest Crawl-delay honoured (seconds between two requests); a host asking
# for more is not fetched at all (robots_disallowed), as a Retry-After past
# max_retry_after gives up at once: a build cannot wait a day per image.
MAX_CRAWL_DELAY = 120.0
# Failures of the robots.txt request that say the host itself is refused,
# unknown or not to be trusted: its images end with that reason, as they would
# have on their own, not robots_unavailable.
HOST_REASONS = frozenset({"blocked_address", "dns_error", "bad_url", "tls_error"})


def origin_of(url: str) -> str | None:
    """The origin whose robots.txt rules ``url`` (``None``: not http(s)).

    >>> origin_of("HTTPS://Img.Example.org/a/b.jpg?x=1"), origin_of("http://a.example:8080/x")
    ('https://img.example.org', 'http://a.example:8080')
    >>> origin_of("file:///tmp/a.jpg"), origin_of("http://[::1]:81/x")
    (None, 'http://[::1]:81')
    """
    try:
        parts = urllib.parse.urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not host:
        return None
    if ":" in host:
        host = f"[{host}]"
    default = 443 if scheme == "https" else 80
    return f"{scheme}://{host}" + (f":{port}" if port not in (None, default) else "")


def robots_url(origin: str) -> str:
    """The URL of ``origin``'s robots.txt.

    >>> robots_url("https://a.example")
    'https://a.example/robots.txt'
    """
    return origin + "/robots.txt"


@dataclasses.dataclass(frozen=True)
class RobotsAnswer:
    """A host's lasting answer: its status and (for a 2xx) its text, and when
    it was fetched (seconds since the epoch)."""

    origin: str
    status: int
    body: str = ""
    fetched_at: float = 0.0

    def to_json(self) -> bytes:
        return json.dumps(dataclasses.asdict(self), sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> "RobotsAnswer":
        """The answer :meth:`to_json` wrote.

        >>> RobotsAnswer.from_json(RobotsAnswer("http://a.example", 404, "", 5.0).to_json())
        RobotsAnswer(origin='http://a.example', status=404, body='', fetched_at=5.0)
        """
        fields = json.loads(data)
        return cls(
            str(fields["origin"]),
            int(fields["status"]),
            str(fields.get("body", "")),
            float(fields.get("fetched_at", 0.0)),
        )


def decode_body(data: bytes) -> str:
    """robots.txt bytes as text: UTF-8 (a byte-order mark dropped), at most
    :data:`MAX_BYTES` of it, undecodable bytes replaced.

    >>> decode_body(b"\\xef\\xbb\\xbfUser-agent: *\\r\\n")
    'User-agent: *\\r\\n'
    """
    return data[:MAX_BYTES].decode("utf-8-sig", errors="replace")


@dataclasses.dataclass(frozen=True)
class Robots:
    """What one origin's robots.txt allows: a refusal reason per URL, and the
    seconds to keep between two requests (``Crawl-delay``; 0: none)."""

    parser: Protego | None = None  # None: every URL has ``reason`` (or none)
    reason: str | None = None
    detail: str = ""
    crawl_delay: float = 0.0

    @classmethod
    def from_answer(cls, answer: RobotsAnswer) -> "Robots":
        if 200 <= answer.status < 300:
            try:
                parser = Protego.parse(answer.body)
                delay = float(parser.crawl_delay(ROBOTS_TOKEN) or 0.0)
            except Exception as exc:  # a parser bug must not let a host through, nor stop a build
                return cls(reason="robots_unavailable", detail=f"robots.txt: unparsed ({exc})")
            if delay > MAX_CRAWL_DELAY:
                return cls(
                    reason="robots_disallowed",
                    detail=f"Crawl-delay {delay:g} s, over the {MAX_CRAWL_DELAY:g} s a build waits",
                )
            return cls(parser=parser, crawl_delay=delay if delay > 0 else 0.0)  # nan: none
        return cls()  # RFC 9309 2.3.1.3: "unavailable" (4xx) allows everything

    @classmethod
    def unavailable(cls, reason: str, status: int | None = None, detail: str = "") -> "Robots":
        """The verdict when robots.txt could not be had (``reason`` is the
        request's failure): every URL of the host is refused for this build.

        >>> Robots.unavailable("dns_error").reason, Robots.unavailable("timeout").reason
        ('dns_error', 'robots_unavailable')
        """
        if reason in HOST_REASONS:
            return cls(reason=reason, detail=detail)
        said = f"HTTP {status}" if status else reason
        return cls(reason="robots_unavailable", detail=f"robots.txt: {said} {detail}".strip())

    def refusal(self, url: str) -> str | None:
        """``None`` when ``url`` may be fetched, else the reason it may not."""
        if self.parser is None:
            return self.reason
        return None if self.parser.can_fetch(url, ROBOTS_TOKEN) else "robots_disallowed"


def is_fresh(answer: RobotsAnswer, now: float) -> bool:
    """May a build use ``answer`` at ``now`` (wall-clock seconds)?

    >>> is_fresh(RobotsAnswer("http://a.example", 200, "", 1000.0), 1000.0 + MAX_AGE - 1)
    True
    >>> is_fresh(RobotsAnswer("http://a.example", 200, "", 1000.0), 1000.0 + MAX_AGE)
    False
    """
    return 0 <= now - answer.fetched_at < MAX_AGE


class RobotsKeeper(Protocol):
    """Where answers outlive a build (the image store's ``robots/`` folder)."""

    def load(self, origin: str) -> RobotsAnswer | None: ...

    def save(self, answer: RobotsAnswer) -> None: ...


class RobotsBook:
    """Each origin's :class:`Robots` for one fetcher: learned once, kept in
    memory and, with a ``keeper``, across builds for :data:`MAX_AGE`.
    ``clock`` is wall-clock time (an answer's age outlives a process).

    >>> book = RobotsBook(clock=lambda: 50.0)
    >>> book.verdict("http://a.example") is None               # not asked yet
    True
    >>> book.learn("http://a.example", 200, b"User-agent: corpora\\nDisallow: /\\n").crawl_delay
    0.0
    >>> book.verdict("http://a.example").refusal("http://a.example/x.jpg")
    'robots_disallowed'
    """

    def __init__(self, clock: Callable[[], float] = time.time, keeper: RobotsKeeper | None = None):
        self.clock = clock
        self.keeper = keeper
        self._verdicts: dict[str, Robots] = {}

    def verdict(self, origin: str) -> Robots | None:
        """The origin's verdict, or ``None`` when robots.txt must be fetched."""
        found = self._verdicts.get(origin)
        if found is None and self.keeper is not None:
            answer = self.keeper.load(origin)
            if answer is not None and is_fresh(answer, self.clock()):
                found = self._remember(origin, Robots.from_answer(answer))
        return found

    def learn(self, origin: str, status: int, data: bytes = b"") -> Robots:
        """A 2xx or 4xx answer: kept, and its verdict."""
        answer = RobotsAnswer(
            origin, status, decode_body(data) if 200 <= status < 300 else "", self.clock()
        )
        if self.keeper is not None:
            self.keeper.save(answer)
        return self._remember(origin, Robots.from_answer(answer))

    def fail(self, origin: str, reason: str, status: int | None = None, detail: str = "") -> Robots:
        """No answer worth keeping: the host is refused for this fetcher's life."""
        return self._remember(origin, Robots.unavailable(reason, status, detail))

    def _remember(self, origin: str, robots: Robots) -> Robots:
        if len(self._verdicts) > 100_000:  # memory stays flat over millions of hosts
            self._verdicts.clear()
        self._verdicts[origin] = robots
        return robots
