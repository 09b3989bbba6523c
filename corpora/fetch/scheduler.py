"""The fetch scheduler: many image URLs in flight, politely.

:class:`Fetcher` holds what lives as long as a worker: ``concurrency`` I/O
threads, a decode pool (decoding never blocks the network), keep-alive
connections pooled per host and address, cached DNS answers and the per-host
politeness of :mod:`corpora.fetch.politeness`. Each :meth:`Fetcher.fetch`
call runs one :class:`Schedule`, whose loop is

1. :meth:`Schedule.admit`: retries that are due, then new URLs, read lazily
   up to a look-ahead, so memory stays flat however long the list is; a URL
   of a host whose robots.txt (:mod:`corpora.fetch.robots`) is not known
   yet waits while it is fetched, once per host, as a request like any
   other (the same guard, timeouts, politeness, redirects and retries); a
   URL robots.txt refuses ends there, without a request; with ``tdmrep``
   set, the host's ``/.well-known/tdmrep.json`` (:mod:`corpora.fetch.tdmrep`)
   is asked for next, the same way;
2. :meth:`Schedule.start`: start what politeness allows;
3. :meth:`Schedule.wait`: until a request or a decode finishes, or the next
   host or retry is due;
4. :meth:`Schedule.settle`: a finished request becomes a redirect hop (a new,
   checked request), a decode, a retry after a pause (connection errors, 5xx,
   429: exponential backoff with jitter, or the server's ``Retry-After``,
   without holding a thread while waiting), or a final outcome.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import heapq
import itertools
import math
import os
import queue
import random
import time
import urllib.parse
from typing import Callable, Iterable, Iterator

from corpora.fetch.attempt import Attempt, attempt
from corpora.fetch.connections import ConnectionPool, DnsCache, Proxies
from corpora.fetch.image import process_image
from corpora.fetch.politeness import HostPolicy
from corpora.fetch.robots import Robots, RobotsBook, origin_of, robots_url
from corpora.fetch.settings import TRANSIENT, FetchSettings, ImageOutcome
from corpora.fetch.tdmrep import TdmRules, tdmrep_url

# Per-host state of idle hosts is forgotten this often (seconds), so memory
# stays flat over millions of hosts.
FORGET_IDLE_EVERY = 30.0


@dataclasses.dataclass
class Task:
    """One URL on its way: ``url`` as given (the key of its outcome), ``current``
    after redirects."""

    url: str
    current: str
    attempts: int = 0
    hops: int = 0
    # a request for a host's policy file: (ROBOTS or TDMREP, the origin it speaks for)
    policy: tuple[str, str] | None = None


ROBOTS, TDMREP = "robots.txt", "tdmrep.json"


def host_of(url: str) -> str:
    """The host a URL's politeness is counted against (``""`` for none).

    >>> host_of("https://Images.Example.org:8443/a.jpg"), host_of("file:///tmp/a.jpg")
    ('images.example.org', '')
    """
    try:
        return (urllib.parse.urlsplit(url).hostname or "").lower()
    except ValueError:
        return ""


class Fetcher:
    """Fetch and process many image URLs concurrently.

    ``fetch(urls)`` yields ``(url, ImageOutcome)`` in completion order. One
    Fetcher is used by one thread at a time (a Beam DoFn instance holds one).
    ``clock`` and ``sleep`` are injectable, so a test can drive time.
    ``on_body(url, body, status)``, when set, receives each body as the server
    sent it, before it is decoded, on the thread that iterates ``fetch`` (the
    image store keeps the originals this way). ``robots`` holds each host's
    robots.txt verdict for the fetcher's life (the image store gives it a
    keeper, so answers outlive a build); ``proxies``: the proxies requests go
    through (by default those the environment names).
    """

    def __init__(
        self,
        settings: FetchSettings,
        sleep_cap: float = 0.25,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        robots: RobotsBook | None = None,
        proxies: Proxies | None = None,
    ):
        self.settings = settings
        self.sleep_cap = sleep_cap
        self.clock = clock
        self.sleep = sleep
        self.robots = robots or RobotsBook()
        self.tdm: dict[str, TdmRules] = {}  # origin → its tdmrep.json rules (with settings.tdmrep)
        proxies = Proxies.from_environment() if proxies is None else proxies
        self.pool = ConnectionPool(settings.per_host_concurrency, proxies)
        self.dns = DnsCache(clock=clock)
        self.hosts = HostPolicy(settings.per_host_concurrency, settings.per_host_rate)
        self.io = concurrent.futures.ThreadPoolExecutor(
            settings.concurrency, thread_name_prefix="fetch-io"
        )
        self.decoder = concurrent.futures.ThreadPoolExecutor(
            settings.decode_threads or os.cpu_count() or 1, thread_name_prefix="fetch-decode"
        )
        self._random = random.Random(0)
        self.on_body: Callable[[str, bytes, int | None], None] | None = None

    def close(self) -> None:
        self.io.shutdown(wait=False, cancel_futures=True)
        self.decoder.shutdown(wait=False, cancel_futures=True)
        self.pool.close()

    def __enter__(self) -> "Fetcher":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def backoff(self, attempts: int, retry_after: float | None) -> float:
        """Seconds to wait before attempt ``attempts + 1``: the server's
        ``Retry-After`` if it sent one, else exponential with "equal jitter"."""
        if retry_after is not None:
            return retry_after
        ceiling = min(self.settings.backoff_max, self.settings.backoff_base * 2 ** (attempts - 1))
        return ceiling * (0.5 + 0.5 * self._random.random())

    def fetch(self, urls: Iterable[str]) -> Iterator[tuple[str, ImageOutcome]]:
        return Schedule(self, urls).run()


class Schedule:
    """The state of one :meth:`Fetcher.fetch` call, advanced one step at a time."""

    def __init__(self, fetcher: Fetcher, urls: Iterable[str]):
        self.fetcher = fetcher
        self.settings = fetcher.settings
        self.source = iter(urls)
        self.exhausted = False
        self.queued: dict[str, collections.deque[Task]] = {}  # host → tasks ready to start
        self.n_queued = 0
        self.waiting: list[tuple[float, int, Task]] = []  # (not before, tiebreak, task): retries
        self._tiebreak = itertools.count()
        self.parked: dict[str, list[Task]] = {}  # origin → tasks waiting for a policy file
        self.finals: collections.deque[ImageOutcome] = collections.deque()  # no request made
        self.requests: dict[concurrent.futures.Future, tuple[Task, str]] = {}
        self.decoding: dict[concurrent.futures.Future, tuple[Task, int | None]] = {}
        self.lookahead = self.settings.concurrency * 4
        self._completed: queue.SimpleQueue[concurrent.futures.Future] = queue.SimpleQueue()
        self._forgotten_at = fetcher.clock()

    def run(self) -> Iterator[tuple[str, ImageOutcome]]:
        clock = self.fetcher.clock
        while True:
            now = clock()
            self.forget_idle_hosts(now)
            self.admit(now)
            wake = self.start(now)
            while self.finals:
                outcome = self.finals.popleft()
                yield outcome.url, outcome
            if self.finished:
                return
            if self.waiting:
                wake = min(wake, self.waiting[0][0])
            for future in self.wait(max(0.0, min(wake - clock(), self.fetcher.sleep_cap))):
                outcome = self.settle(future)
                if outcome is not None:
                    yield outcome.url, outcome

    @property
    def in_flight(self) -> int:
        return len(self.requests) + len(self.decoding)

    @property
    def finished(self) -> bool:
        return self.exhausted and not (
            self.in_flight or self.queued or self.waiting or self.parked or self.finals
        )

    def forget_idle_hosts(self, now: float) -> None:
        if now - self._forgotten_at > FORGET_IDLE_EVERY:
            self.fetcher.hosts.forget_idle(now)
            self._forgotten_at = now

    def enqueue(self, task: Task) -> None:
        """Queue ``task`` under its host once its policy files allow it.
        ``n_queued`` counts image URLs queued or parked, policy file requests not."""
        self.n_queued += task.policy is None
        origin = None if task.policy else origin_of(task.current)
        if origin is not None:
            if origin in self.parked:
                self.parked[origin].append(task)
                return
            robots = self.fetcher.robots.verdict(origin)
            if robots is None:  # ask for robots.txt first, once
                self.ask(ROBOTS, origin, robots_url(origin), task)
                return
            if self.refused(task, robots):
                return
            if self.settings.tdmrep and self.settings.respect_opt_out:
                rules = self.fetcher.tdm.get(origin)
                if rules is None:
                    self.ask(TDMREP, origin, tdmrep_url(origin), task)
                    return
                if self.refused(task, rules):
                    return
        self.queued.setdefault(host_of(task.current), collections.deque()).append(task)

    def ask(self, kind: str, origin: str, url: str, task: Task) -> None:
        """Park ``task`` until ``origin``'s policy file ``url`` has answered."""
        self.parked[origin] = [task]
        self.enqueue(Task(url, url, policy=(kind, origin)))

    def refused(self, task: Task, verdict: Robots | TdmRules) -> bool:
        """Does ``verdict`` refuse ``task``'s URL? Then it ends, without a request."""
        reason = verdict.refusal(task.current)
        if reason is None:
            return False
        self.n_queued -= 1
        self.finals.append(
            ImageOutcome(task.url, reason=reason, attempts=task.attempts, detail=verdict.detail)
        )
        return True

    def learned(self, task: Task, result: Attempt) -> None:
        """A policy file request ended: its verdict, then the tasks it held back."""
        assert task.policy is not None
        kind, origin = task.policy
        if kind == TDMREP:  # no file, or no answer: nothing reserved
            if len(self.fetcher.tdm) > 100_000:  # memory stays flat over millions of hosts
                self.fetcher.tdm.clear()
            self.fetcher.tdm[origin] = TdmRules.from_answer(result.status or 0, result.data or b"")
        else:
            book = self.fetcher.robots
            if result.reason is None:
                robots = book.learn(origin, result.status or 200, result.data or b"")
            elif result.status and 400 <= result.status < 500 and result.status != 429:
                robots = book.learn(origin, result.status)
            else:
                robots = book.fail(origin, result.reason or "", result.status, result.detail)
            if robots.crawl_delay:
                self.fetcher.hosts.space(host_of(origin), robots.crawl_delay)
        for parked in self.parked.pop(origin, ()):
            self.n_queued -= 1
            self.enqueue(parked)

    def admit(self, now: float) -> None:
        """Queue the retries due by ``now``, then new URLs up to the look-ahead."""
        while self.waiting and self.waiting[0][0] <= now:
            self.enqueue(heapq.heappop(self.waiting)[2])
        while not self.exhausted and self.n_queued < self.lookahead:
            url = next(self.source, None)
            if url is None:
                self.exhausted = True
                break
            self.enqueue(Task(url, url))

    def start(self, now: float) -> float:
        """Start what politeness allows; returns when a held-back host is next due.

        Bodies waiting for a decode thread count against ``concurrency``, so
        memory stays flat when the network outpaces the CPU.
        """
        fetcher, settings = self.fetcher, self.settings
        next_wake = math.inf
        for host in list(self.queued):
            tasks = self.queued[host]
            while tasks and self.in_flight < settings.concurrency:
                wait = fetcher.hosts.try_acquire(host, now) if host else 0.0
                if wait > 0:
                    next_wake = min(next_wake, now + wait)
                    break
                task = tasks.popleft()
                self.n_queued -= task.policy is None
                task.attempts = task.attempts or 1
                future = fetcher.io.submit(
                    attempt,
                    task.current,
                    settings,
                    fetcher.pool,
                    fetcher.dns,
                    fetcher.clock,
                    task.policy is not None,
                )
                self.requests[future] = (task, host)
                future.add_done_callback(self._completed.put)
            if not tasks:
                del self.queued[host]
        return next_wake

    def wait(self, timeout: float) -> list[concurrent.futures.Future]:
        """The requests and decodes that finished within ``timeout`` seconds."""
        if not self.in_flight:
            self.fetcher.sleep(timeout)  # only retries or held-back hosts are left
            return []
        done = []
        try:
            done.append(self._completed.get(timeout=timeout))
            while True:
                done.append(self._completed.get_nowait())
        except queue.Empty:
            pass
        return done

    def settle(self, future: concurrent.futures.Future) -> ImageOutcome | None:
        """What a finished request or decode leads to: a final outcome, or
        ``None`` while the URL is still on its way."""
        if future in self.decoding:
            task, status = self.decoding.pop(future)
            return dataclasses.replace(
                future.result(), url=task.url, status=status, attempts=task.attempts
            )
        task, host = self.requests.pop(future)
        if host:
            self.fetcher.hosts.release(host)
        return self.fetched(task, host, future.result())

    def fetched(self, task: Task, host: str, result: Attempt) -> ImageOutcome | None:
        if result.location is not None:
            return self.redirect(task, result)
        if result.reason is None:
            if task.policy is not None:
                self.learned(task, result)
            else:
                self.decode(task, result)
            return None
        if result.reason == "http_429" or result.status == 503:
            self.pause(task, host, result)
        if (
            result.reason in TRANSIENT
            and task.attempts < self.settings.max_attempts
            and (result.retry_after or 0) <= self.settings.max_retry_after
        ):
            self.retry(task, result.retry_after)
            return None
        return self.failed(task, result)

    def redirect(self, task: Task, result: Attempt) -> ImageOutcome | None:
        """The next hop is a new request, checked like the first."""
        task.hops += 1
        target = urllib.parse.urljoin(task.current, result.location or "")
        if task.hops > self.settings.max_redirects:
            return self.failed(task, Attempt(reason="too_many_redirects", status=result.status))
        if urllib.parse.urlsplit(target).scheme.lower() not in ("http", "https"):
            return self.failed(
                task, Attempt(reason="bad_redirect", status=result.status, detail=target)
            )
        task.current = target
        self.enqueue(task)
        return None

    def decode(self, task: Task, result: Attempt) -> None:
        if self.fetcher.on_body is not None:
            self.fetcher.on_body(task.url, result.data or b"", result.status)
        future = self.fetcher.decoder.submit(process_image, result.data or b"", self.settings)
        self.decoding[future] = (task, result.status)
        future.add_done_callback(self._completed.put)

    def pause(self, task: Task, host: str, result: Attempt) -> None:
        """A host that answered 429 or 503 gets nothing more until it is due."""
        if not host:
            return
        pause = (
            result.retry_after
            if result.retry_after is not None
            else self.fetcher.backoff(task.attempts, None)
        )
        self.fetcher.hosts.pause(
            host, self.fetcher.clock() + min(pause, self.settings.max_retry_after)
        )

    def retry(self, task: Task, retry_after: float | None) -> None:
        """Try ``task`` again from its first URL once its backoff has passed."""
        delay = self.fetcher.backoff(task.attempts, retry_after)
        task.attempts += 1
        task.hops = 0
        task.current = task.url
        heapq.heappush(self.waiting, (self.fetcher.clock() + delay, next(self._tiebreak), task))

    def failed(self, task: Task, result: Attempt) -> ImageOutcome | None:
        if task.policy is not None:
            self.learned(task, result)
            return None
        return ImageOutcome(
            task.url,
            reason=result.reason,
            status=result.status,
            attempts=task.attempts,
            detail=result.detail,
        )
