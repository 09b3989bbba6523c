"""Connections pinned to a checked address, kept alive in a pool, the DNS
answers they were checked against, and the proxies they go through.

:mod:`http.client` resolves a host name itself when it connects; these
connections are handed the address the guard judged instead, so the request
cannot land anywhere else. TLS still verifies the certificate against the
host name.

Through a proxy (``HTTPS_PROXY``, ``HTTP_PROXY``, ``NO_PROXY``: :class:`Proxies`)
the guard still judges the target, never the proxy: an https request is
tunnelled with ``CONNECT`` to the checked address itself, so the pinning
holds; a plain-http request is sent to the proxy in absolute form, by host
name (the form proxies route by), after the name's addresses were checked.
"""

from __future__ import annotations

import base64
import collections
import dataclasses
import http.client
import select
import socket
import ssl
import threading
import time
import urllib.parse
import urllib.request
from typing import Callable, Mapping

# Module level so that a test can trust its own CA (monkeypatch this name).
SSL_CONTEXT = ssl.create_default_context()


@dataclasses.dataclass(frozen=True)
class Proxy:
    """A forward proxy: where it listens, and its ``Proxy-Authorization`` if
    its URL carries a user."""

    host: str
    port: int
    authorization: str | None = None

    @classmethod
    def from_url(cls, url: str) -> "Proxy":
        """The proxy a ``*_PROXY`` variable names (port 8080 when it names none).

        >>> Proxy.from_url("http://user:pw@proxy.lab:3128")
        Proxy(host='proxy.lab', port=3128, authorization='Basic dXNlcjpwdw==')
        >>> Proxy.from_url("proxy.lab").port
        8080
        """
        parts = urllib.parse.urlsplit(url if "://" in url else f"http://{url}")
        authorization = None
        if parts.username is not None:
            user = urllib.parse.unquote(parts.username)
            password = urllib.parse.unquote(parts.password or "")
            authorization = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        return cls(parts.hostname or "", parts.port or 8080, authorization)


class Proxies:
    """Which proxy, if any, a request to a host goes through: ``HTTPS_PROXY``
    for https, ``HTTP_PROXY`` for http, none for a host ``NO_PROXY`` names
    (the rules of :mod:`urllib.request`, which reads them).

    >>> proxies = Proxies({"https": "http://proxy.lab:3128", "no": "intranet.lab"})
    >>> proxies.for_target("https", "images.example"), proxies.for_target("http", "images.example")
    (Proxy(host='proxy.lab', port=3128, authorization=None), None)
    >>> proxies.for_target("https", "cdn.intranet.lab") is None
    True
    """

    def __init__(self, settings: Mapping[str, str] | None = None):
        self._settings = {key.lower(): value for key, value in (settings or {}).items() if value}
        self._proxies = {
            scheme: Proxy.from_url(self._settings[scheme])
            for scheme in ("http", "https")
            if scheme in self._settings
        }

    @classmethod
    def from_environment(cls) -> "Proxies":
        """``HTTP_PROXY``, ``HTTPS_PROXY`` and ``NO_PROXY`` (either case)."""
        return cls(urllib.request.getproxies_environment())

    def __bool__(self) -> bool:
        return bool(self._proxies)

    def for_target(self, scheme: str, host: str) -> Proxy | None:
        proxy = self._proxies.get(scheme)
        if proxy is None or urllib.request.proxy_bypass_environment(host, self._settings):
            return None
        return proxy


def tunnel(sock: socket.socket, target: str, proxy: Proxy) -> None:
    """Ask ``proxy``, connected on ``sock``, for a tunnel to ``target``
    (``address:port``); raises ``OSError`` when it says no."""
    lines = [f"CONNECT {target} HTTP/1.1", f"Host: {target}"]
    if proxy.authorization:
        lines.append(f"Proxy-Authorization: {proxy.authorization}")
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("ascii"))
    response = http.client.HTTPResponse(sock, method="CONNECT")
    try:
        response.begin()
    except http.client.HTTPException as exc:
        raise ConnectionError(f"proxy {proxy.host}:{proxy.port}: {exc}") from None
    if response.status != 200:
        raise ConnectionError(
            f"proxy {proxy.host}:{proxy.port} answered {response.status} to CONNECT {target}"
        )


class PinnedHTTPConnection(http.client.HTTPConnection):
    """Connects to an address chosen (and checked) beforehand, directly or
    through ``proxy``."""

    def __init__(
        self,
        host: str,
        port: int,
        address: str,
        timeout: float,
        connect_timeout: float,
        proxy: Proxy | None = None,
    ):
        super().__init__(host, port, timeout=timeout)
        self._address = address
        self._connect_timeout = connect_timeout
        self.proxy = proxy

    def connect(self) -> None:
        proxy = self.proxy
        where = (self._address, self.port) if proxy is None else (proxy.host, proxy.port)
        self.sock = socket.create_connection(where, self._connect_timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.settimeout(self.timeout)


class PinnedHTTPSConnection(PinnedHTTPConnection):
    default_port = 443

    def __init__(self, *args, context: ssl.SSLContext, **kwargs):
        super().__init__(*args, **kwargs)
        self._context = context

    def connect(self) -> None:
        super().connect()
        if self.proxy is not None:
            address = f"[{self._address}]" if ":" in self._address else self._address
            tunnel(self.sock, f"{address}:{self.port}", self.proxy)
        self.sock = self._context.wrap_socket(self.sock, server_hostname=self.host)


class ConnectionPool:
    """Idle keep-alive connections by (scheme, host, port, pinned address),
    and the ``proxies`` new ones go through."""

    def __init__(self, max_idle_per_key: int, proxies: Proxies | None = None):
        self._idle: dict[tuple, list[PinnedHTTPConnection]] = collections.defaultdict(list)
        self._max_idle = max_idle_per_key
        self._lock = threading.Lock()
        self.proxies = proxies or Proxies()

    def get(self, key: tuple) -> PinnedHTTPConnection | None:
        while True:
            with self._lock:
                idle = self._idle.get(key)
                if not idle:
                    return None
                conn = idle.pop()
                if not idle:
                    del self._idle[key]
            if not unread(conn.sock):
                return conn
            conn.close()  # bytes nobody asked for arrived while it sat idle

    def put(self, key: tuple, conn: PinnedHTTPConnection) -> None:
        """Keep ``conn`` for the next request to ``key``: only where its last
        response ended exactly where its framing said (no byte waits unread:
        a body longer than its Content-Length would be read as the next
        URL's response, an image smuggled into the store)."""
        if unread(conn.sock):
            conn.close()
            return
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


def unread(sock: socket.socket | None) -> bool:
    """Are there bytes (or the end of the stream) waiting on ``sock``, with
    no request in flight? A connection that has them is not reused."""
    if sock is None:  # not connected (or closed): the next request connects afresh
        return False
    if isinstance(sock, ssl.SSLSocket) and sock.pending():
        return True
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):  # closed
        return True
    return bool(readable)


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
