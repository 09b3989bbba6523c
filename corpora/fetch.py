"""Image fetch: download, check, decode, resize, re-encode.

Every image ends as a success or as exactly one named reason (``http_404``,
``timeout``, ``not_image``, ``blocked_address`` … see :data:`REASONS`).
Nothing here raises for a bad URL or a bad image.

:class:`Fetcher` keeps many requests in flight (``concurrency`` I/O threads,
keep-alive connections pooled per host and address), driven by one scheduler
that applies the per-host politeness of :mod:`corpora.politeness`, schedules
retries (connection errors, 5xx, 429: exponential backoff with jitter, or the
server's ``Retry-After``) without holding a thread while waiting, and hands
bodies to a separate decode pool so decoding never blocks the network.

Addresses are checked before connecting: a host that resolves to a loopback,
private, link-local (the cloud metadata address 169.254.169.254 among them),
multicast or reserved address is refused unless ``allow_private_urls`` is set
(or the address is inside one of ``allow_networks``), and the connection goes
to the address that was checked, so a DNS answer that changes between the
check and the connect cannot slip past it. Every redirect hop is a new
request, checked again.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import email.utils
import hashlib
import heapq
import http.client
import io
import ipaddress
import itertools
import math
import os
import queue
import random
import socket
import ssl
import threading
import time
import urllib.parse
import urllib.request
import warnings
from typing import Callable, Iterable, Iterator, Mapping

from corpora.politeness import HostPolicy
from corpora.record import Document, Drop, ImageChunk

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")  # img2dataset imports albumentations

USER_AGENT = "corpora/0.1 (+https://github.com/corpora-dev/corpora; multimodal corpus builder)"
RESIZE_MODES = ("no", "border", "keep_ratio", "keep_ratio_largest", "center_crop")
OPT_OUT_DIRECTIVES = frozenset({"noai", "noimageai", "noindex", "noimageindex"})
TRANSIENT = frozenset({"connection_error", "http_5xx", "http_429"})

# Every reason an image can fail with (the manifest's ``images.failed`` keys),
# besides ``http_<status>`` for any other non-2xx status (``http_404`` …).
REASONS = (
    "bad_scheme",
    "bad_url",
    "bad_redirect",
    "blocked_address",
    "dns_error",
    "connection_error",
    "tls_error",
    "timeout",
    "too_many_redirects",
    "http_5xx",
    "http_429",
    "opted_out",
    "too_large",
    "empty_body",
    "not_image",
    "decode_error",
    "too_many_pixels",
    "too_small",
    "bad_aspect",
    "file_not_found",
    "file_error",
)


@dataclasses.dataclass(frozen=True)
class FetchSettings:
    image_size: int = 256
    resize_mode: str = "center_crop"
    resize_only_if_bigger: bool = False
    jpeg_quality: int = 95
    connect_timeout: float = 10.0
    read_timeout: float = 20.0
    total_timeout: float = 60.0  # one attempt, headers to last byte
    max_bytes: int = 32 << 20
    max_redirects: int = 5
    min_image_size: int = 0
    max_aspect_ratio: float = float("inf")
    max_pixels: int = 89_478_485  # Pillow's decompression-bomb threshold
    allow_private_urls: bool = False
    allow_networks: tuple[
        str, ...
    ] = ()  # CIDRs let through the address guard, e.g. an internal mirror
    user_agent: str = USER_AGENT
    concurrency: int = 64
    max_attempts: int = 3
    backoff_base: float = 1.0
    backoff_max: float = 60.0
    max_retry_after: float = 120.0  # a longer Retry-After gives up at once
    per_host_concurrency: int = 4
    per_host_rate: float = 10.0  # request starts per second per host; 0: unlimited
    respect_opt_out: bool = True
    decode_threads: int = 0  # 0: one per core
    retry_failures: str | None = (
        None  # a failures.parquet: fetch only the records holding these URLs
    )
    retry_reasons: tuple[str, ...] = ()  # …only the URLs that failed for these reasons (empty: all)
    progress_interval: float = 10.0  # seconds between progress lines on stderr; 0: none

    def __post_init__(self) -> None:
        if self.resize_mode not in RESIZE_MODES:
            raise ValueError(
                f"unknown resize mode {self.resize_mode!r}; one of {', '.join(RESIZE_MODES)}"
            )
        if not 1 <= self.jpeg_quality <= 100:
            raise ValueError(f"jpeg quality must be in 1..100, got {self.jpeg_quality}")
        for name in ("concurrency", "max_attempts", "per_host_concurrency"):
            if getattr(self, name) < 1:
                raise ValueError(
                    f"{name.replace('_', ' ')} must be at least 1, got {getattr(self, name)}"
                )
        for name in ("connect_timeout", "read_timeout", "total_timeout"):
            if not getattr(self, name) > 0:
                raise ValueError(
                    f"{name.replace('_', ' ')} must be positive, got {getattr(self, name)}"
                )
        if self.max_aspect_ratio < 1:
            raise ValueError(f"max aspect ratio must be at least 1, got {self.max_aspect_ratio}")
        for network in self.allow_networks:
            try:
                ipaddress.ip_network(network, strict=False)
            except ValueError:
                raise ValueError(f"not an IP network: {network!r}") from None


@dataclasses.dataclass(frozen=True)
class FetchResult:
    """The body of a URL, or why there is none."""

    url: str
    data: bytes | None = None
    reason: str | None = None
    status: int | None = None
    detail: str = ""
    attempts: int = 1

    @property
    def ok(self) -> bool:
        return self.reason is None


@dataclasses.dataclass(frozen=True)
class ImageResult:
    """A decoded, resized, re-encoded image, or why there is none."""

    data: bytes | None = None
    width: int = 0
    height: int = 0
    original_width: int = 0
    original_height: int = 0
    reason: str | None = None
    detail: str = ""


@dataclasses.dataclass(frozen=True)
class ImageOutcome:
    """What became of one image URL: the final JPEG, or one reason."""

    url: str
    data: bytes | None = None
    width: int = 0
    height: int = 0
    original_width: int = 0
    original_height: int = 0
    reason: str | None = None
    status: int | None = None
    attempts: int = 0
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.reason is None

    @classmethod
    def combine(cls, fetched: FetchResult, image: ImageResult | None) -> "ImageOutcome":
        if not fetched.ok or image is None:
            return cls(
                fetched.url,
                reason=fetched.reason or "decode_error",
                status=fetched.status,
                attempts=fetched.attempts,
                detail=fetched.detail,
            )
        return cls(
            fetched.url,
            image.data,
            image.width,
            image.height,
            image.original_width,
            image.original_height,
            image.reason,
            fetched.status,
            fetched.attempts,
            image.detail,
        )


# ---------------------------------------------------------------- addresses


def address_is_public(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


def address_allowed(address: str, settings: FetchSettings) -> bool:
    """May we connect to ``address``?

    >>> s = FetchSettings()
    >>> [address_allowed(a, s) for a in ("93.184.216.34", "127.0.0.1", "169.254.169.254", "10.1.2.3", "::1")]
    [True, False, False, False, False]
    >>> address_allowed("10.1.2.3", FetchSettings(allow_networks=("10.0.0.0/8",)))
    True
    """
    if settings.allow_private_urls or address_is_public(address):
        return True
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    return any(ip in ipaddress.ip_network(n, strict=False) for n in settings.allow_networks)


def _resolve(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(info[4][0] for info in infos))


class _PinnedHTTPConnection(http.client.HTTPConnection):
    """Connects to an address chosen (and checked) beforehand."""

    def __init__(self, host: str, port: int, address: str, timeout: float, connect_timeout: float):
        super().__init__(host, port, timeout=timeout)
        self._address = address
        self._connect_timeout = connect_timeout

    def connect(self) -> None:
        self.sock = socket.create_connection((self._address, self.port), self._connect_timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.settimeout(self.timeout)


class _PinnedHTTPSConnection(_PinnedHTTPConnection):
    default_port = 443

    def __init__(self, *args, context: ssl.SSLContext, **kwargs):
        super().__init__(*args, **kwargs)
        self._context = context

    def connect(self) -> None:
        super().connect()
        self.sock = self._context.wrap_socket(self.sock, server_hostname=self.host)


_SSL_CONTEXT = ssl.create_default_context()


class ConnectionPool:
    """Idle keep-alive connections by (scheme, host, port, pinned address)."""

    def __init__(self, max_idle_per_key: int):
        self._idle: dict[tuple, list[_PinnedHTTPConnection]] = collections.defaultdict(list)
        self._max_idle = max_idle_per_key
        self._lock = threading.Lock()

    def get(self, key: tuple) -> _PinnedHTTPConnection | None:
        with self._lock:
            idle = self._idle.get(key)
            if idle:
                conn = idle.pop()
                if not idle:
                    del self._idle[key]
                return conn
        return None

    def put(self, key: tuple, conn: _PinnedHTTPConnection) -> None:
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


class _DnsCache:
    """Resolved addresses per (host, port) for a minute: the check and the
    connect use the same cached answer, so pinning holds."""

    def __init__(self, ttl: float = 60.0):
        self._ttl = ttl
        self._cache: dict[tuple[str, int], tuple[float, list[str]]] = {}
        self._lock = threading.Lock()

    def resolve(self, host: str, port: int) -> list[str]:
        now = time.monotonic()
        with self._lock:
            hit = self._cache.get((host, port))
        if hit and hit[0] > now:
            return hit[1]
        addresses = _resolve(host, port)
        with self._lock:
            if len(self._cache) > 100_000:
                self._cache.clear()
            self._cache[(host, port)] = (now + self._ttl, addresses)
        return addresses


# ---------------------------------------------------------------- one request


@dataclasses.dataclass(frozen=True)
class _Attempt:
    """The result of one request: a body, a redirect, or a failure."""

    data: bytes | None = None
    reason: str | None = None
    status: int | None = None
    detail: str = ""
    location: str | None = None
    retry_after: float | None = None


def opted_out(robots_tags: Iterable[str], agent_token: str = "corpora") -> bool:
    """Does an ``X-Robots-Tag`` forbid using the image for AI training?

    Directives for every crawler, for ``*`` or for our own token count;
    directives addressed to another crawler (``otherbot: noindex``) do not.

    >>> opted_out(["noai, noimageai"]), opted_out(["googlebot: noindex"]), opted_out(["none"])
    (True, False, False)
    >>> opted_out(["corpora: noimageindex"]), opted_out(["max-image-preview:large"])
    (True, False)
    """
    for value in robots_tags:
        scope = None  # a "bot:" prefix applies to the directives after it in the same header
        for part in value.split(","):
            part = part.strip().lower()
            head, colon, rest = part.partition(":")
            if colon and head.strip() not in _DIRECTIVES_WITH_VALUE:
                scope, part = head.strip(), rest.strip()
            if part in OPT_OUT_DIRECTIVES and scope in (None, "*", agent_token.lower()):
                return True
    return False


_DIRECTIVES_WITH_VALUE = frozenset(
    {"max-image-preview", "max-snippet", "max-video-preview", "unavailable_after"}
)


def _agent_token(user_agent: str) -> str:
    return user_agent.split("/", 1)[0].split()[0] if user_agent.strip() else "corpora"


def _retry_after(value: str | None) -> float | None:
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


def _read_file_url(url: str, settings: FetchSettings) -> _Attempt:
    path = (
        urllib.request.url2pathname(urllib.parse.urlsplit(url).path)
        if url.startswith("file:")
        else url
    )
    try:
        size = os.path.getsize(path)
        if size > settings.max_bytes:
            return _Attempt(reason="too_large", detail=f"{size} bytes")
        with open(path, "rb") as handle:
            return _Attempt(data=handle.read())
    except FileNotFoundError:
        return _Attempt(reason="file_not_found")
    except OSError as exc:
        return _Attempt(reason="file_error", detail=str(exc))


# Characters left as they are when a URL's path and query are percent-encoded
# for the request line (web URL lists hold raw spaces and non-ASCII text).
_URL_SAFE = "/?#[]@!$&'()*+,;=:%~-._"


def _http_attempt(
    url: str, settings: FetchSettings, pool: ConnectionPool, dns: _DnsCache
) -> _Attempt:
    parts = urllib.parse.urlsplit(url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        host = parts.hostname.encode("idna").decode("ascii")
    except (ValueError, UnicodeError) as exc:
        return _Attempt(reason="bad_url", detail=str(exc))
    try:
        addresses = dns.resolve(host, port)
    except (socket.gaierror, UnicodeError, OSError) as exc:
        return _Attempt(reason="dns_error", detail=str(exc))
    blocked = [a for a in addresses if not address_allowed(a, settings)]
    if blocked:
        return _Attempt(reason="blocked_address", detail=blocked[0])
    key = (parts.scheme, host, port, addresses[0])
    target = urllib.parse.quote(
        (parts.path or "/") + (f"?{parts.query}" if parts.query else ""), safe=_URL_SAFE
    )
    headers = {
        "User-Agent": settings.user_agent,
        "Accept": "image/*,*/*;q=0.8",
        "Accept-Encoding": "identity",
    }
    started = time.monotonic()
    deadline = started + settings.total_timeout
    conn = pool.get(key)
    reused = conn is not None
    while True:
        if conn is None:
            args = (host, port, addresses[0], settings.read_timeout, settings.connect_timeout)
            if parts.scheme == "https":
                conn = _PinnedHTTPSConnection(*args, context=_SSL_CONTEXT)
            else:
                conn = _PinnedHTTPConnection(*args)
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
            return _Attempt(reason="connection_error", detail=str(exc) or type(exc).__name__)
        except Exception as exc:
            conn.close()
            return _classify(exc)
    keep = False
    try:
        status = response.status
        if status in (301, 302, 303, 307, 308):
            location = response.getheader("Location")
            return _Attempt(
                reason=None if location else "bad_redirect", status=status, location=location
            )
        if status == 429 or status >= 500:
            return _Attempt(
                reason="http_429" if status == 429 else "http_5xx",
                status=status,
                retry_after=_retry_after(response.getheader("Retry-After")),
            )
        if not 200 <= status < 300:
            return _Attempt(reason=f"http_{status}", status=status)
        if settings.respect_opt_out and opted_out(
            response.headers.get_all("X-Robots-Tag") or (), _agent_token(settings.user_agent)
        ):
            return _Attempt(reason="opted_out", status=status)  # the body is never read
        length = response.getheader("Content-Length")
        if length and length.strip().isdigit() and int(length) > settings.max_bytes:
            return _Attempt(reason="too_large", status=status, detail=f"Content-Length {length}")
        body = bytearray()
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return _Attempt(
                    reason="timeout",
                    status=status,
                    detail=f"over {settings.total_timeout}s in total",
                )
            sock.settimeout(min(settings.read_timeout, remaining))
            chunk = response.read1(65536)
            if not chunk:
                break
            body += chunk
            if len(body) > settings.max_bytes:
                return _Attempt(
                    reason="too_large", status=status, detail=f"over {settings.max_bytes} bytes"
                )
        keep = not response.will_close
        response.close()  # marks the exchange done, so the connection can carry the next request
        return _Attempt(data=bytes(body), status=status)
    except Exception as exc:
        return _classify(exc)
    finally:
        if keep:
            sock.settimeout(settings.read_timeout)
            pool.put(key, conn)
        else:
            conn.close()


def _classify(exc: BaseException) -> _Attempt:
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return _Attempt(reason="timeout", detail=str(exc))
    if isinstance(exc, ssl.SSLError):
        return _Attempt(reason="tls_error", detail=str(exc))
    return _Attempt(reason="connection_error", detail=str(exc) or type(exc).__name__)


def _attempt(url: str, settings: FetchSettings, pool: ConnectionPool, dns: _DnsCache) -> _Attempt:
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError as exc:
        return _Attempt(reason="bad_url", detail=str(exc))
    scheme = parts.scheme.lower()
    if scheme in ("http", "https"):
        if not parts.hostname:
            return _Attempt(reason="bad_url", detail="no host")
        return _http_attempt(url, settings, pool, dns)
    if scheme == "file" or (scheme == "" and url.startswith("/")):
        return _read_file_url(url, settings)
    return _Attempt(reason="bad_scheme", detail=scheme or "no scheme")


# ---------------------------------------------------------------- decode and resize


_RESIZERS: dict[FetchSettings, Callable] = {}
_RESIZER_LOCK = threading.Lock()


class _NoSuppress:
    def __enter__(self) -> None:
        pass

    def __exit__(self, *exc) -> None:
        pass


def _resizer(settings: FetchSettings):
    resizer = _RESIZERS.get(settings)
    if resizer is None:
        import img2dataset.resizer
        from img2dataset.resizer import ResizeMode, Resizer

        # The resizer silences OpenCV by dup2-ing /dev/null over fds 1 and 2 and
        # back. That is process-wide: from several decode threads at once, one
        # thread saves the other's /dev/null and "restores" it, and the worker's
        # stdout and stderr stay silenced for good. Truncated JPEGs, the warning
        # it hides, are refused before the resizer sees them (_jpeg_complete).
        img2dataset.resizer.SuppressStdoutStderr = _NoSuppress

        with _RESIZER_LOCK:
            resizer = _RESIZERS.setdefault(
                settings,
                Resizer(
                    image_size=settings.image_size,
                    resize_mode=ResizeMode[settings.resize_mode],
                    resize_only_if_bigger=settings.resize_only_if_bigger,
                    encode_quality=settings.jpeg_quality,
                    encode_format="jpg",
                ),
            )
    return resizer


def _jpeg_complete(data: bytes) -> bool:
    """A JPEG's last scan ends with EOI (FF D9); a truncated download does not.

    Scan data stuffs every FF byte (FF 00), so FF D9 after the last SOS marker
    is the real end of image. OpenCV decodes a truncated JPEG into a grey-
    padded image without error, so this check is what catches it.
    """
    last_scan = data.rfind(b"\xff\xda")
    return last_scan >= 0 and data.find(b"\xff\xd9", last_scan) >= 0


def _normalise(image) -> "object":
    """First frame, EXIF orientation applied, RGB (alpha matted on white, as img2dataset does)."""
    from PIL import Image, ImageOps

    image.seek(0)
    image.load()
    image = ImageOps.exif_transpose(image)
    if image.mode in ("P", "PA"):
        image = image.convert("RGBA")
    if image.mode in ("RGBA", "LA", "La", "RGBa"):
        image = image.convert("RGBA")
        background = Image.new("RGB", image.size, (255, 255, 255))
        background.paste(image, mask=image.getchannel("A"))
        return background
    if image.mode.startswith("I;16") or image.mode == "I":
        image = image.point(lambda v: v / 256).convert("L")
    return image.convert("RGB") if image.mode not in ("RGB", "L") else image


def process_image(data: bytes, settings: FetchSettings) -> ImageResult:
    """Check, decode, resize (img2dataset's resizer) and re-encode as JPEG.

    Size, pixel-count and aspect checks read only the header, so a
    decompression bomb is refused before anything is decoded.
    """
    try:
        return _process_image(data, settings)
    except Exception as exc:  # a corrupt header field (EXIF, ICC …) Pillow trips over
        return ImageResult(reason="decode_error", detail=f"{type(exc).__name__}: {exc}")


def _process_image(data: bytes, settings: FetchSettings) -> ImageResult:
    from PIL import Image

    if not data:
        return ImageResult(reason="empty_body")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data))
    except Image.DecompressionBombError as exc:
        return ImageResult(reason="too_many_pixels", detail=str(exc))
    except Exception:  # Pillow raises many types for non-images
        return ImageResult(reason="not_image")
    with image:
        width, height = image.size
        if width < 1 or height < 1:
            return ImageResult(reason="decode_error", detail=f"size {width}x{height}")
        if width * height > settings.max_pixels:
            return ImageResult(
                reason="too_many_pixels",
                detail=f"{width}x{height}",
                original_width=width,
                original_height=height,
            )
        if min(width, height) < settings.min_image_size:
            return ImageResult(
                reason="too_small",
                detail=f"{width}x{height}",
                original_width=width,
                original_height=height,
            )
        if max(width, height) / min(width, height) > settings.max_aspect_ratio:
            return ImageResult(
                reason="bad_aspect",
                detail=f"{width}x{height}",
                original_width=width,
                original_height=height,
            )
        orientation = (
            image.getexif().get(0x0112, 1) if image.format in ("JPEG", "TIFF", "WEBP", "PNG") else 1
        )
        if image.format == "JPEG" and image.mode in ("RGB", "L") and orientation == 1:
            if not _jpeg_complete(data):
                return ImageResult(reason="decode_error", detail="truncated JPEG")
            stream = io.BytesIO(data)  # OpenCV decodes plain JPEGs directly
        else:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    normalised = _normalise(image)
            except Exception as exc:  # truncated or corrupt data
                return ImageResult(reason="decode_error", detail=str(exc))
            stream = io.BytesIO()
            normalised.save(stream, "PPM")  # uncompressed hand-over to the resizer
    jpeg, out_w, out_h, original_w, original_h, error = _resizer(settings)(stream)
    if error is not None or jpeg is None:
        return ImageResult(reason="decode_error", detail=str(error))
    return ImageResult(jpeg, out_w, out_h, original_w, original_h)


# ---------------------------------------------------------------- the scheduler


@dataclasses.dataclass
class _Task:
    url: str  # as given: the key of the outcome
    current: str  # after redirects
    attempts: int = 0
    hops: int = 0


def _host_of(url: str) -> str:
    try:
        return (urllib.parse.urlsplit(url).hostname or "").lower()
    except ValueError:
        return ""


class Fetcher:
    """Fetch and process many image URLs concurrently.

    ``fetch(urls)`` yields ``(url, ImageOutcome)`` in completion order, reading
    ``urls`` lazily, so memory stays flat however long the list is. One
    Fetcher is used by one thread at a time (a Beam DoFn instance holds one).
    """

    def __init__(self, settings: FetchSettings, sleep_cap: float = 0.25):
        self.settings = settings
        self._pool = ConnectionPool(settings.per_host_concurrency)
        self._dns = _DnsCache()
        self._hosts = HostPolicy(settings.per_host_concurrency, settings.per_host_rate)
        self._io = concurrent.futures.ThreadPoolExecutor(
            settings.concurrency, thread_name_prefix="fetch-io"
        )
        self._decode = concurrent.futures.ThreadPoolExecutor(
            settings.decode_threads or os.cpu_count() or 1, thread_name_prefix="fetch-decode"
        )
        self._sleep_cap = sleep_cap
        self._random = random.Random(0)

    def close(self) -> None:
        self._io.shutdown(wait=False, cancel_futures=True)
        self._decode.shutdown(wait=False, cancel_futures=True)
        self._pool.close()

    def __enter__(self) -> "Fetcher":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return retry_after
        ceiling = min(self.settings.backoff_max, self.settings.backoff_base * 2 ** (attempt - 1))
        return ceiling * (0.5 + 0.5 * self._random.random())  # "equal jitter"

    def fetch(self, urls: Iterable[str]) -> Iterator[tuple[str, ImageOutcome]]:
        settings = self.settings
        source = iter(urls)
        exhausted = False
        queued: dict[str, collections.deque[_Task]] = {}  # host → tasks ready to start
        n_queued = 0
        waiting: list[tuple[float, int, _Task]] = []  # (not before, tiebreak, task): retries
        tiebreak = itertools.count()
        io_futures: dict[concurrent.futures.Future, tuple[_Task, str]] = {}
        decode_futures: dict[concurrent.futures.Future, tuple[_Task, _Attempt]] = {}
        lookahead = settings.concurrency * 4
        completed: queue.SimpleQueue[concurrent.futures.Future] = queue.SimpleQueue()

        def finish(task: _Task, result: _Attempt) -> tuple[str, ImageOutcome]:
            return task.url, ImageOutcome(
                task.url,
                reason=result.reason,
                status=result.status,
                attempts=task.attempts,
                detail=result.detail,
            )

        forgotten_at = time.monotonic()
        while True:
            now = time.monotonic()
            if (
                now - forgotten_at > 30
            ):  # per-host state of idle hosts: memory flat over millions of hosts
                self._hosts.forget_idle(now)
                forgotten_at = now
            while waiting and waiting[0][0] <= now:
                task = heapq.heappop(waiting)[2]
                queued.setdefault(_host_of(task.current), collections.deque()).append(task)
                n_queued += 1
            while not exhausted and n_queued < lookahead:
                url = next(source, None)
                if url is None:
                    exhausted = True
                    break
                task = _Task(url, url)
                queued.setdefault(_host_of(url), collections.deque()).append(task)
                n_queued += 1
            # Start what politeness allows, and no more than decoding keeps up
            # with: bodies waiting for a decode thread count against the limit,
            # so memory stays flat when the network outpaces the CPU.
            next_wake = math.inf
            for host in list(queued):
                tasks = queued[host]
                while tasks and len(io_futures) + len(decode_futures) < settings.concurrency:
                    wait = self._hosts.try_acquire(host, now) if host else 0.0
                    if wait > 0:
                        next_wake = min(next_wake, now + wait)
                        break
                    task = tasks.popleft()
                    n_queued -= 1
                    task.attempts = task.attempts or 1
                    future = self._io.submit(
                        _attempt, task.current, settings, self._pool, self._dns
                    )
                    io_futures[future] = (task, host)
                    future.add_done_callback(completed.put)
                if not tasks:
                    del queued[host]
            if not io_futures and not decode_futures and not queued and not waiting and exhausted:
                return
            if waiting:
                next_wake = min(next_wake, waiting[0][0])
            timeout = max(0.0, min(next_wake - time.monotonic(), self._sleep_cap))
            if not io_futures and not decode_futures:
                time.sleep(timeout)
                continue
            done = []
            try:
                done.append(completed.get(timeout=timeout))
                while True:
                    done.append(completed.get_nowait())
            except queue.Empty:
                pass
            for future in done:
                if future in decode_futures:
                    task, result = decode_futures.pop(future)
                    image = future.result()
                    yield (
                        task.url,
                        ImageOutcome.combine(
                            FetchResult(task.url, status=result.status, attempts=task.attempts),
                            image,
                        ),
                    )
                    continue
                task, host = io_futures.pop(future)
                if host:
                    self._hosts.release(host)
                result = future.result()
                if (
                    result.location is not None
                ):  # a redirect: the next hop is a new, checked request
                    task.hops += 1
                    target = urllib.parse.urljoin(task.current, result.location)
                    if task.hops > settings.max_redirects:
                        yield finish(
                            task, _Attempt(reason="too_many_redirects", status=result.status)
                        )
                    elif urllib.parse.urlsplit(target).scheme.lower() not in ("http", "https"):
                        yield finish(
                            task,
                            _Attempt(reason="bad_redirect", status=result.status, detail=target),
                        )
                    else:
                        task.current = target
                        queued.setdefault(_host_of(target), collections.deque()).append(task)
                        n_queued += 1
                    continue
                if result.reason is None:
                    future = self._decode.submit(process_image, result.data or b"", settings)
                    decode_futures[future] = (task, result)
                    future.add_done_callback(completed.put)
                    continue
                if result.reason in ("http_429",) or result.status == 503:
                    pause = (
                        result.retry_after
                        if result.retry_after is not None
                        else self._backoff(task.attempts, None)
                    )
                    if host:
                        self._hosts.pause(
                            host, time.monotonic() + min(pause, settings.max_retry_after)
                        )
                retry = (
                    result.reason in TRANSIENT
                    and task.attempts < settings.max_attempts
                    and (result.retry_after or 0) <= settings.max_retry_after
                )
                if retry:
                    delay = self._backoff(task.attempts, result.retry_after)
                    task.attempts += 1
                    task.hops = 0
                    task.current = task.url
                    heapq.heappush(waiting, (time.monotonic() + delay, next(tiebreak), task))
                    continue
                yield finish(task, result)


def fetch_images(urls: Iterable[str], settings: FetchSettings) -> dict[str, ImageOutcome]:
    """Fetch ``urls`` with a short-lived :class:`Fetcher`; outcome per URL."""
    with Fetcher(settings) as fetcher:
        return dict(fetcher.fetch(dict.fromkeys(urls)))


def fetch_url(url: str, settings: FetchSettings) -> FetchResult:
    """Download one URL (http, https, file URL or a plain local path), following redirects."""
    pool, dns = ConnectionPool(1), _DnsCache()
    try:
        current = url
        for _ in range(settings.max_redirects + 1):
            result = _attempt(current, settings, pool, dns)
            if result.location is None:
                return FetchResult(url, result.data, result.reason, result.status, result.detail)
            current = urllib.parse.urljoin(current, result.location)
            if urllib.parse.urlsplit(current).scheme.lower() not in ("http", "https"):
                return FetchResult(url, reason="bad_redirect", status=result.status, detail=current)
        return FetchResult(url, reason="too_many_redirects")
    finally:
        pool.close()


def fetch_image(url: str, settings: FetchSettings) -> tuple[FetchResult, ImageResult | None]:
    fetched = fetch_url(url, settings)
    if not fetched.ok:
        return fetched, None
    return fetched, process_image(fetched.data or b"", settings)


# ---------------------------------------------------------------- records


def select_for_retry(doc: Document, urls: frozenset[str] | set[str]) -> Document | Drop:
    """Keep a record only if one of its images is in ``urls`` (a previous
    build's failures), so a retry build fetches exactly those."""
    if any(image.url in urls for image in doc.images):
        return doc
    return Drop("not_in_retry_list", doc.id, url=doc.images[0].url if doc.images else None)


def attach_images(
    doc: Document,
    results: Mapping[str, ImageOutcome | tuple[FetchResult, ImageResult | None]],
    drop_document_on_failure: bool,
) -> Document | Drop:
    """Put fetched images into ``doc``'s image chunks.

    A failed image either drops the whole record with its reason (pair
    corpora: a pair without its image is no pair) or is removed from the
    document (interleaved corpora); the per-image outcome is recorded in
    ``meta["image_failures"]`` either way.
    """
    chunks = []
    failures = []
    for chunk in doc.chunks:
        if not isinstance(chunk, ImageChunk) or chunk.fetched:
            chunks.append(chunk)
            continue
        outcome = results[chunk.url]
        if isinstance(outcome, tuple):
            outcome = ImageOutcome.combine(*outcome)
        if not outcome.ok:
            if drop_document_on_failure:
                return Drop(outcome.reason, doc.id, url=chunk.url, detail=outcome.detail)
            failures.append({"url": chunk.url, "reason": outcome.reason, "status": outcome.status})
            continue
        assert outcome.data is not None
        chunks.append(
            dataclasses.replace(
                chunk,
                data=outcome.data,
                width=outcome.width,
                height=outcome.height,
                sha256=hashlib.sha256(outcome.data).hexdigest(),
                meta={
                    **chunk.meta,
                    "original_width": outcome.original_width,
                    "original_height": outcome.original_height,
                },
            )
        )
    document = doc.replace(chunks=tuple(chunks))
    return document.with_meta(image_failures=failures) if failures else document
