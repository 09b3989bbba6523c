"""One attempt at one URL: a body, a redirect to follow, or a named failure.

The headers are read before the body: an image whose ``X-Robots-Tag`` opts
out of AI use (:func:`opted_out`) or whose ``tdm-reservation`` header
reserves text-and-data-mining rights (W3C TDMRep, :func:`tdm_reserved`) ends
there, its body never read. A request for a host's policy file
(``policy_file=True``: its robots.txt or tdmrep.json) skips those checks
and keeps the first :data:`~corpora.fetch.robots.MAX_BYTES` of a longer
file, as RFC 9309 asks.

An attempt follows no redirect and retries nothing: the scheduler
(:mod:`corpora.fetch.scheduler`) decides what a redirect or a transient
failure leads to, so every hop and every retry is a new, checked attempt.
Nothing here raises for a bad URL or a bad answer.
"""

from __future__ import annotations

import dataclasses
import email.utils
import http.client
import os
import socket
import ssl
import stat
import time
import urllib.parse
import urllib.request
from typing import Callable, Iterable

from corpora.fetch import connections
from corpora.fetch.connections import ConnectionPool, DnsCache
from corpora.fetch.guard import refusal
from corpora.fetch.robots import MAX_BYTES as ROBOTS_MAX_BYTES
from corpora.fetch.robots import ROBOTS_TOKEN
from corpora.fetch.settings import FetchSettings

OPT_OUT_DIRECTIVES = frozenset({"noai", "noimageai", "noml", "noindex", "noimageindex"})
_DIRECTIVES_WITH_VALUE = frozenset(
    {"max-image-preview", "max-snippet", "max-video-preview", "unavailable_after"}
)
# Characters left as they are when a URL's path and query are percent-encoded
# for the request line (web URL lists hold raw spaces and non-ASCII text).
_URL_SAFE = "/?#[]@!$&'()*+,;=:%~-._"
_REDIRECTS = (301, 302, 303, 307, 308)


@dataclasses.dataclass(frozen=True)
class Attempt:
    """The result of one request: a body, a redirect (``location``), or a failure."""

    data: bytes | None = None
    reason: str | None = None
    status: int | None = None
    detail: str = ""
    location: str | None = None
    retry_after: float | None = None


def opted_out(robots_tags: Iterable[str], agent_token: str = ROBOTS_TOKEN) -> bool:
    """Does an ``X-Robots-Tag`` forbid using the image for AI training?

    Directives for every crawler, for ``*``, for ``corpora`` or for the
    user agent's own token count; directives addressed to another crawler
    (``otherbot: noindex``) do not.

    >>> opted_out(["noai, noimageai"]), opted_out(["googlebot: noindex"]), opted_out(["none"])
    (True, False, False)
    >>> opted_out(["corpora: noimageindex"]), opted_out(["max-image-preview:large"])
    (True, False)
    >>> opted_out(["noml"]), opted_out(["corpora: noml"], "lab"), opted_out(["lab: noml"], "lab")
    (True, True, True)
    """
    ours = (None, "*", ROBOTS_TOKEN, agent_token.lower())
    for value in robots_tags:
        scope = None  # a "bot:" prefix applies to the directives after it in the same header
        for part in value.split(","):
            part = part.strip().lower()
            head, colon, rest = part.partition(":")
            if colon and head.strip() not in _DIRECTIVES_WITH_VALUE:
                scope, part = head.strip(), rest.strip()
            if part in OPT_OUT_DIRECTIVES and scope in ours:
                return True
    return False


def tdm_reserved(values: Iterable[str]) -> bool:
    """Does a ``tdm-reservation`` header (W3C TDMRep) reserve text and data
    mining rights? ``1`` does; ``0`` or anything else does not.

    >>> tdm_reserved(["1"]), tdm_reserved([" 1 "]), tdm_reserved(["0"]), tdm_reserved([])
    (True, True, False, False)
    """
    return any(value.strip() == "1" for value in values)


def agent_token(user_agent: str) -> str:
    """The user agent's own product token (``corpora`` always counts too).

    >>> agent_token("mybot/1.0 (+https://example.org/bot) corpora/0.1.0"), agent_token("  ")
    ('mybot', 'corpora')
    """
    return user_agent.split("/", 1)[0].split()[0] if user_agent.strip() else ROBOTS_TOKEN


def retry_after_seconds(value: str | None) -> float | None:
    """A ``Retry-After`` header in seconds (it holds seconds or an HTTP date).

    >>> retry_after_seconds("7"), retry_after_seconds("soon"), retry_after_seconds(None)
    (7.0, None, None)
    """
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def local_path(url: str) -> tuple[str | None, str]:
    """The local path a ``file:`` URL or a plain path names, or ``None`` and
    why not: a ``file:`` URL names this machine only with no host or
    ``localhost`` (``file://evil.example/x`` is no local file to read).

    >>> local_path("file:///data/a%20b.jpg"), local_path("/data/c.jpg")
    (('/data/a b.jpg', ''), ('/data/c.jpg', ''))
    >>> local_path("file://127.0.0.1/etc/passwd")
    (None, "file URL with host '127.0.0.1'")
    """
    if not url.lower().startswith("file:"):
        return url, ""
    parts = urllib.parse.urlsplit(url)
    if parts.netloc.lower() not in ("", "localhost"):
        return None, f"file URL with host {parts.netloc!r}"
    return urllib.request.url2pathname(parts.path), ""


def _under(path: str, directory: str) -> bool:
    return os.path.commonpath([path, directory]) == directory


def read_file(
    url: str, settings: FetchSettings, clock: Callable[[], float] = time.monotonic
) -> Attempt:
    """A local file, only where ``settings.allow_local_files`` allows it: a
    regular file (not a FIFO, a device or a directory) under one of those
    directories once symbolic links are resolved, read with the size cap and
    the total timeout of an HTTP body. Anything else is ``local_file``."""
    if not settings.allow_local_files:
        return Attempt(reason="local_file", detail="local files are off (--allow-local-files DIR)")
    path, why = local_path(url)
    if path is None:
        return Attempt(reason="local_file", detail=why)
    real = os.path.realpath(path)
    if not any(_under(real, directory) for directory in settings.allow_local_files):
        return Attempt(reason="local_file", detail=f"{real} is outside --allow-local-files")
    deadline = clock() + settings.total_timeout
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; O_NOFOLLOW: the
        # last component cannot have become a link since it was resolved
        flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)
        descriptor = os.open(real, flags | getattr(os, "O_BINARY", 0))
    except FileNotFoundError:
        return Attempt(reason="file_not_found")
    except OSError as exc:
        return Attempt(reason="file_error", detail=f"{real}: {exc.strerror or exc}")
    status = os.fstat(descriptor)
    if not stat.S_ISREG(status.st_mode):
        os.close(descriptor)
        return Attempt(reason="local_file", detail=f"{real} is not a regular file")
    if status.st_size > settings.max_bytes:
        os.close(descriptor)
        return Attempt(reason="too_large", detail=f"{status.st_size} bytes")
    body = bytearray()
    with os.fdopen(descriptor, "rb", buffering=0) as handle:
        try:
            while chunk := handle.read(65536):
                body += chunk
                if len(body) > settings.max_bytes:  # the file grew while being read
                    return Attempt(reason="too_large", detail=f"over {settings.max_bytes} bytes")
                if clock() > deadline:
                    return Attempt(
                        reason="timeout", detail=f"over {settings.total_timeout}s in total"
                    )
        except OSError as exc:
            return Attempt(reason="file_error", detail=f"{real}: {exc.strerror or exc}")
    return Attempt(data=bytes(body))


def http_attempt(
    url: str,
    settings: FetchSettings,
    pool: ConnectionPool,
    dns: DnsCache,
    clock: Callable[[], float] = time.monotonic,
    policy_file: bool = False,
) -> Attempt:
    """One GET of an http(s) URL to a checked address, over a pooled
    connection (through a proxy where ``pool.proxies`` names one)."""
    parts = urllib.parse.urlsplit(url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        host = parts.hostname.encode("idna").decode("ascii")
    except (ValueError, UnicodeError) as exc:
        return Attempt(reason="bad_url", detail=str(exc))
    try:
        addresses = dns.resolve(host, port)
    except (socket.gaierror, UnicodeError, OSError) as exc:
        return Attempt(reason="dns_error", detail=str(exc))
    for address in addresses:  # one refused address refuses the host: DNS picks which we get
        why = refusal(address, settings)
        if why:
            return Attempt(reason="blocked_address", detail=f"{why} ({address})")
    proxy = pool.proxies.for_target(parts.scheme, host) if pool.proxies else None
    key = (parts.scheme, host, port, addresses[0], proxy)
    target = urllib.parse.quote(
        (parts.path or "/") + (f"?{parts.query}" if parts.query else ""), safe=_URL_SAFE
    )
    headers = {
        "User-Agent": settings.user_agent,
        "Accept": "text/plain,application/json,*/*;q=0.5" if policy_file else "image/*,*/*;q=0.8",
        "Accept-Encoding": "identity",
    }
    if proxy is not None and parts.scheme == "http":  # absolute form: the proxy routes by it
        netloc = host if port == 80 else f"{host}:{port}"
        target = f"http://{netloc}{target}"
        if proxy.authorization:
            headers["Proxy-Authorization"] = proxy.authorization
    max_bytes = ROBOTS_MAX_BYTES if policy_file else settings.max_bytes
    deadline = clock() + settings.total_timeout
    conn = pool.get(key)
    reused = conn is not None
    while True:
        if conn is None:
            args = (host, port, addresses[0], settings.read_timeout, settings.connect_timeout)
            if parts.scheme == "https":
                conn = connections.PinnedHTTPSConnection(
                    *args, proxy=proxy, context=connections.SSL_CONTEXT
                )
            else:
                conn = connections.PinnedHTTPConnection(*args, proxy=proxy)
        try:
            conn.request("GET", target, headers=headers)
            sock = conn.sock  # outlives conn.close() when the response says Connection: close
            response = conn.getresponse()
            break
        except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as exc:
            conn.close()
            conn = None
            if reused:  # the server closed an idle pooled connection: try a fresh one, same attempt
                reused = False
                continue
            return Attempt(reason="connection_error", detail=str(exc) or type(exc).__name__)
        except Exception as exc:
            conn.close()
            return classify(exc)
    keep = False
    try:
        status = response.status
        if policy_file and not 200 <= status < 300:  # "no robots.txt" comes once per host:
            keep = _drained(response)  # keep the connection for its images
        if status in _REDIRECTS:
            location = response.getheader("Location")
            return Attempt(
                reason=None if location else "bad_redirect", status=status, location=location
            )
        if status == 429 or status >= 500:
            return Attempt(
                reason="http_429" if status == 429 else "http_5xx",
                status=status,
                retry_after=retry_after_seconds(response.getheader("Retry-After")),
            )
        if not 200 <= status < 300:
            return Attempt(reason=f"http_{status}", status=status)
        if settings.respect_opt_out and not policy_file:  # the body is never read
            if opted_out(
                response.headers.get_all("X-Robots-Tag") or (), agent_token(settings.user_agent)
            ):
                return Attempt(reason="opted_out", status=status)
            if tdm_reserved(response.headers.get_all("tdm-reservation") or ()):
                return Attempt(reason="tdm_reserved", status=status)
        length = response.getheader("Content-Length")
        if length and length.strip().isdigit() and int(length) > max_bytes and not policy_file:
            return Attempt(reason="too_large", status=status, detail=f"Content-Length {length}")
        body = bytearray()
        while True:
            remaining = deadline - clock()
            if remaining <= 0:
                return Attempt(
                    reason="timeout",
                    status=status,
                    detail=f"over {settings.total_timeout}s in total",
                )
            sock.settimeout(min(settings.read_timeout, remaining))
            chunk = response.read1(65536)
            if not chunk:
                break
            body += chunk
            if len(body) > max_bytes:
                if policy_file:  # RFC 9309 2.5: the first 500 KiB are parsed, the rest ignored
                    return Attempt(data=bytes(body[:max_bytes]), status=status)
                return Attempt(
                    reason="too_large", status=status, detail=f"over {settings.max_bytes} bytes"
                )
        keep = not response.will_close
        response.close()  # marks the exchange done, so the connection can carry the next request
        return Attempt(data=bytes(body), status=status)
    except Exception as exc:
        return classify(exc)
    finally:
        if keep:
            sock.settimeout(settings.read_timeout)
            pool.put(key, conn)
        else:
            conn.close()


def _drained(response: http.client.HTTPResponse) -> bool:
    """Read a short error body to its end; may the connection carry another request?"""
    if response.length is None or response.length > 65536:
        return False
    response.read()
    return not response.will_close


def classify(exc: BaseException) -> Attempt:
    """The reason for an exception a request raised."""
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return Attempt(reason="timeout", detail=str(exc))
    if isinstance(exc, ssl.SSLError):
        return Attempt(reason="tls_error", detail=str(exc))
    return Attempt(reason="connection_error", detail=str(exc) or type(exc).__name__)


def attempt(
    url: str,
    settings: FetchSettings,
    pool: ConnectionPool,
    dns: DnsCache,
    clock: Callable[[], float] = time.monotonic,
    policy_file: bool = False,
) -> Attempt:
    """One attempt at ``url``: http(s), a ``file:`` URL or a plain local path
    (local files only where :func:`read_file` allows them); ``policy_file``:
    the URL is a host's robots.txt or tdmrep.json.

        >>> attempt("gopher://example.com/x", FetchSettings(), ConnectionPool(1), DnsCache()).reason
        'bad_scheme'
    """
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError as exc:
        return Attempt(reason="bad_url", detail=str(exc))
    scheme = parts.scheme.lower()
    if scheme in ("http", "https"):
        if not parts.hostname:
            return Attempt(reason="bad_url", detail="no host")
        return http_attempt(url, settings, pool, dns, clock, policy_file)
    if scheme == "file" or (scheme == "" and url.startswith("/")):
        return read_file(url, settings, clock)
    return Attempt(reason="bad_scheme", detail=scheme or "no scheme")
