"""Per-host politeness for the image fetcher.

A :class:`HostPolicy` decides when the next request to a host may start: at
most ``max_concurrent`` requests in flight per host, at most ``rate`` request
starts per second (a token bucket holding one second's worth, so a small
burst starts at once), a pause for a host that answered 429 or 503, and for
a host whose robots.txt asks for a ``Crawl-delay``, that many seconds
between two starts.

It is used by a single scheduler thread, so it holds no locks; the clock is
passed in, which keeps it a pure, testable object.
"""

from __future__ import annotations

import dataclasses
import math


@dataclasses.dataclass
class _Host:
    in_flight: int = 0
    tokens: float = 0.0
    refilled_at: float = 0.0
    paused_until: float = 0.0


class HostPolicy:
    """When may the next request to a host start?

    >>> policy = HostPolicy(max_concurrent=1, rate=2.0)
    >>> policy.try_acquire("a.example", now=0.0), policy.try_acquire("a.example", now=0.0)
    (0.0, inf)
    >>> policy.release("a.example")
    >>> policy.try_acquire("a.example", now=0.0)
    0.0
    >>> policy.release("a.example")
    >>> policy.try_acquire("a.example", now=0.0)
    0.5

    ``try_acquire`` returns 0.0 when a request may start now (and counts it),
    else how many seconds to wait (``inf``: wait for a request to finish).
    """

    def __init__(self, max_concurrent: int = 4, rate: float = 0.0):
        if max_concurrent < 1:
            raise ValueError(f"per-host concurrency must be at least 1, got {max_concurrent}")
        if rate < 0:
            raise ValueError(f"per-host rate must be >= 0 (0: unlimited), got {rate}")
        self.max_concurrent = max_concurrent
        self.rate = rate
        self._hosts: dict[str, _Host] = {}
        self._delays: dict[str, float] = {}  # host → Crawl-delay (seconds between starts)
        self._last_start: dict[str, float] = {}

    def _host(self, host: str, now: float) -> _Host:
        state = self._hosts.get(host)
        if state is None:
            state = self._hosts[host] = _Host(tokens=max(1.0, self.rate), refilled_at=now)
        return state

    def try_acquire(self, host: str, now: float) -> float:
        state = self._host(host, now)
        if now < state.paused_until:
            return state.paused_until - now
        if self.rate > 0:
            state.tokens = min(
                max(1.0, self.rate), state.tokens + (now - state.refilled_at) * self.rate
            )
            state.refilled_at = now
            if state.tokens < 1.0:
                return (1.0 - state.tokens) / self.rate
        if state.in_flight >= self.max_concurrent:
            return math.inf
        delay = self._delays.get(host)
        if delay is not None:
            due = self._last_start.get(host, -math.inf) + delay
            if now < due:
                return due - now
            self._last_start[host] = now
        state.in_flight += 1
        if self.rate > 0:
            state.tokens -= 1.0
        return 0.0

    def release(self, host: str) -> None:
        state = self._hosts.get(host)
        if state is not None and state.in_flight > 0:
            state.in_flight -= 1
            if state.in_flight == 0 and state.paused_until == 0.0 and self.rate == 0:
                del self._hosts[host]  # keeps memory flat over millions of hosts

    def pause(self, host: str, until: float) -> None:
        """Start nothing more on ``host`` before ``until`` (it answered 429/503)."""
        state = self._hosts.get(host) or self._host(host, until)
        state.paused_until = max(state.paused_until, until)

    def space(self, host: str, delay: float) -> None:
        """Keep ``delay`` seconds between two starts on ``host`` (its robots.txt
        ``Crawl-delay``), whatever the rate allows.

        >>> policy = HostPolicy(max_concurrent=4, rate=0.0)
        >>> policy.space("a.example", 2.0)
        >>> policy.try_acquire("a.example", now=10.0), policy.try_acquire("a.example", now=11.5)
        (0.0, 0.5)
        >>> policy.try_acquire("a.example", now=12.0)
        0.0
        """
        if delay > 0:
            self._delays[host] = delay

    def in_flight(self, host: str) -> int:
        state = self._hosts.get(host)
        return state.in_flight if state else 0

    def forget_idle(self, now: float) -> None:
        """Drop state of hosts with nothing in flight, a full bucket and no pause."""
        for host in [
            h
            for h, s in self._hosts.items()
            if s.in_flight == 0
            and s.paused_until <= now
            and (
                self.rate == 0
                or s.tokens + (now - s.refilled_at) * self.rate >= max(1.0, self.rate)
            )
        ]:
            del self._hosts[host]
