"""Connections pinned to a checked address, kept alive in a pool, and the
DNS answers they were checked against.

:mod:`http.client` resolves a host name itself when it connects; these
connections are handed the address the guard judged instead, so the request
cannot land anywhere else. TLS still verifies the certificate against the
host name.
"""

from __future__ import annotations

import collections
import http.client
import socket
import ssl
import threading
import time
from typing import Callable

# Module level so that a test can trust its own CA (monkeypatch this name).
SSL_CONTEXT = ssl.create_default_context()


class PinnedHTTPConnection(http.client.HTTPConnection):
    """Connects to an address chosen (and checked) beforehand."""

    def __init__(self, host: str, port: int, address: str, timeout: float, connect_timeout: float):
        super().__init__(host, port, timeout=timeout)
        self._address = address
        self._connect_timeout = connect_timeout

    def connect(self) -> None:
        self.sock = socket.create_connection((self._address, self.port), self._connect_timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.settimeout(self.timeout)


class PinnedHTTPSConnection(PinnedHTTPConnection):
    default_port = 443

    def __init__(self, *args, context: ssl.SSLContext, **kwargs):
        super().__init__(*args, **kwargs)
        self._context = context

    def connect(self) -> None:
        super().connect()
        self.sock = self._context.wrap_socket(self.sock, server_hostname=self.host)


class ConnectionPool:
    """Idle keep-alive connections by (scheme, host, port, pinned address)."""

    def __init__(self, max_idle_per_key: int):
        self._idle: dict[tuple, list[PinnedHTTPConnection]] = collections.defaultdict(list)
        self._max_idle = max_idle_per_key
        self._lock = threading.Lock()

    def get(self, key: tuple) -> PinnedHTTPConnection | None:
        with self._lock:
            idle = self._idle.get(key)
            if idle:
                conn = idle.pop()
                if not idle:
                    del self._idle[key]
                return conn
        return None

    def put(self, key: tuple, conn: PinnedHTTPConnection) -> None:
        with self._lock:
            idle = self._idle[key]
            if len(idle) < self._max_idle:
                idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        with self._lock:
            conns = [c for idle in self._idle.values() for c in idle]
            self._idle.clear()
        for conn in conns:
            conn.close()


def resolve(host: str, port: int) -> list[str]:
    """The addresses ``host`` resolves to, each once, in the resolver's order."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(info[4][0] for info in infos))


class DnsCache:
    """Resolved addresses per (host, port) for a minute: the check and the
    connect use the same cached answer, so pinning holds."""

    def __init__(
        self,
        ttl: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        lookup: Callable[[str, int], list[str]] = resolve,
    ):
        self._ttl = ttl
        self._clock = clock
        self._lookup = lookup
        self._cache: dict[tuple[str, int], tuple[float, list[str]]] = {}
        self._lock = threading.Lock()

    def resolve(self, host: str, port: int) -> list[str]:
        now = self._clock()
        with self._lock:
            hit = self._cache.get((host, port))
        if hit and hit[0] > now:
            return hit[1]
        addresses = self._lookup(host, port)
        with self._lock:
            if len(self._cache) > 100_000:
                self._cache.clear()
            self._cache[(host, port)] = (now + self._ttl, addresses)
        return addresses
