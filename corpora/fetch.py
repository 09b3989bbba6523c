"""Image fetch: download, check, decode, resize, re-encode.

Every image ends as a success or as exactly one named reason (``http_404``,
``timeout``, ``not_image``, ``blocked_address`` …). Nothing here raises for a
bad URL or a bad image.

Addresses are checked before connecting: a host that resolves to a loopback,
private, link-local (the cloud metadata address 169.254.169.254 among them),
multicast or reserved address is refused unless ``allow_private_urls`` is set,
and the connection goes to the address that was checked, so a DNS answer that
changes between the check and the connect cannot slip past it. Redirects are
followed by hand, each hop checked again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import http.client
import io
import ipaddress
import os
import socket
import ssl
import threading
import urllib.parse
import urllib.request
from typing import Callable

from corpora.record import Document, Drop, ImageChunk

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")  # img2dataset imports albumentations

USER_AGENT = "corpora/0.1 (+https://github.com/corpora-dev/corpora; multimodal corpus builder)"
RESIZE_MODES = ("no", "border", "keep_ratio", "keep_ratio_largest", "center_crop")


@dataclasses.dataclass(frozen=True)
class FetchSettings:
    image_size: int = 256
    resize_mode: str = "center_crop"
    resize_only_if_bigger: bool = False
    jpeg_quality: int = 95
    connect_timeout: float = 10.0
    read_timeout: float = 20.0
    max_bytes: int = 32 << 20
    max_redirects: int = 5
    min_image_size: int = 0
    max_aspect_ratio: float = float("inf")
    max_pixels: int = 89_478_485  # Pillow's decompression-bomb threshold
    allow_private_urls: bool = False
    user_agent: str = USER_AGENT
    concurrency: int = 16


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


def address_is_public(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


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


def _read_file_url(url: str, settings: FetchSettings) -> FetchResult:
    path = urllib.request.url2pathname(urllib.parse.urlsplit(url).path) if url.startswith("file:") else url
    try:
        size = os.path.getsize(path)
        if size > settings.max_bytes:
            return FetchResult(url, reason="too_large", detail=f"{size} bytes")
        with open(path, "rb") as handle:
            return FetchResult(url, data=handle.read())
    except FileNotFoundError:
        return FetchResult(url, reason="file_not_found")
    except OSError as exc:
        return FetchResult(url, reason="file_error", detail=str(exc))


def _http_get(url: str, settings: FetchSettings) -> FetchResult:
    for hop in range(settings.max_redirects + 1):
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return FetchResult(url, reason="bad_scheme" if hop == 0 else "bad_redirect")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            addresses = _resolve(parts.hostname, port)
        except (socket.gaierror, UnicodeError) as exc:
            return FetchResult(url, reason="dns_error", detail=str(exc))
        if not settings.allow_private_urls:
            blocked = [a for a in addresses if not address_is_public(a)]
            if blocked:
                return FetchResult(url, reason="blocked_address", detail=blocked[0])
        args = (parts.hostname, port, addresses[0], settings.read_timeout, settings.connect_timeout)
        if parts.scheme == "https":
            conn = _PinnedHTTPSConnection(*args, context=_SSL_CONTEXT)
        else:
            conn = _PinnedHTTPConnection(*args)
        target = parts.path or "/"
        if parts.query:
            target += "?" + parts.query
        try:
            conn.request("GET", target, headers={"User-Agent": settings.user_agent, "Accept": "image/*"})
            response = conn.getresponse()
            status = response.status
            if status in (301, 302, 303, 307, 308):
                location = response.getheader("Location")
                if not location:
                    return FetchResult(url, reason="bad_redirect", status=status)
                url = urllib.parse.urljoin(url, location)
                continue
            if status != 200:
                reason = "http_5xx" if status >= 500 else f"http_{status}"
                return FetchResult(url, reason=reason, status=status)
            length = response.getheader("Content-Length")
            if length and length.isdigit() and int(length) > settings.max_bytes:
                return FetchResult(url, reason="too_large", status=status, detail=f"{length} bytes")
            body = response.read(settings.max_bytes + 1)
            if len(body) > settings.max_bytes:
                return FetchResult(url, reason="too_large", status=status)
            return FetchResult(url, data=body, status=status)
        except (socket.timeout, TimeoutError):
            return FetchResult(url, reason="timeout")
        except ssl.SSLError as exc:
            return FetchResult(url, reason="tls_error", detail=str(exc))
        except (ConnectionError, http.client.HTTPException, OSError) as exc:
            return FetchResult(url, reason="connection_error", detail=str(exc))
        finally:
            conn.close()
    return FetchResult(url, reason="too_many_redirects")


def fetch_url(url: str, settings: FetchSettings) -> FetchResult:
    """Download ``url`` (http, https, file URL or a plain local path)."""
    scheme = urllib.parse.urlsplit(url).scheme.lower()
    if scheme in ("http", "https"):
        return _http_get(url, settings)
    if scheme == "file" or (scheme == "" and url.startswith("/")):
        return _read_file_url(url, settings)
    return FetchResult(url, reason="bad_scheme")


_RESIZERS: dict[FetchSettings, Callable] = {}
# img2dataset's resizer silences stdout/stderr by swapping file descriptors 1
# and 2; two threads doing it at once leave the process writing to /dev/null.
_RESIZE_LOCK = threading.Lock()


def _resizer(settings: FetchSettings):
    resizer = _RESIZERS.get(settings)
    if resizer is None:
        from img2dataset.resizer import ResizeMode, Resizer

        if settings.resize_mode not in RESIZE_MODES:
            raise ValueError(f"unknown resize mode {settings.resize_mode!r}; one of {RESIZE_MODES}")
        resizer = Resizer(
            image_size=settings.image_size,
            resize_mode=ResizeMode[settings.resize_mode],
            resize_only_if_bigger=settings.resize_only_if_bigger,
            encode_quality=settings.jpeg_quality,
            encode_format="jpg",
            min_image_size=settings.min_image_size,
            max_aspect_ratio=settings.max_aspect_ratio,
            max_image_area=settings.max_pixels,
        )
        _RESIZERS[settings] = resizer
    return resizer


def _reason_from_resizer(message: str) -> str:
    text = message.lower()
    if "too small" in text:
        return "too_small"
    if "aspect ratio" in text:
        return "bad_aspect"
    if "area" in text:
        return "too_many_pixels"
    return "decode_error"


def _looks_like_image(data: bytes) -> bool:
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as image:
            image.size  # noqa: B018 - reading the header is the check
        return True
    except Exception:  # Pillow raises many types for non-images
        return False


def process_image(data: bytes, settings: FetchSettings) -> ImageResult:
    """Decode, resize (img2dataset's resizer) and re-encode as JPEG."""
    if not data:
        return ImageResult(reason="empty_body")
    if not _looks_like_image(data):
        return ImageResult(reason="not_image")
    with _RESIZE_LOCK:
        jpeg, width, height, original_width, original_height, error = _resizer(settings)(io.BytesIO(data))
    if error is not None or jpeg is None:
        return ImageResult(reason=_reason_from_resizer(str(error)), detail=str(error))
    return ImageResult(jpeg, width, height, original_width, original_height)


def fetch_image(url: str, settings: FetchSettings) -> tuple[FetchResult, ImageResult | None]:
    fetched = fetch_url(url, settings)
    if not fetched.ok:
        return fetched, None
    return fetched, process_image(fetched.data or b"", settings)


def attach_images(
    doc: Document,
    results: dict[str, tuple[FetchResult, ImageResult | None]],
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
        fetched, image = results[chunk.url]
        reason = fetched.reason or (image.reason if image else "decode_error")
        if reason is not None:
            if drop_document_on_failure:
                return Drop(reason, doc.id, url=chunk.url, detail=fetched.detail or (image.detail if image else ""))
            failures.append({"url": chunk.url, "reason": reason, "status": fetched.status})
            continue
        assert image is not None and image.data is not None
        chunks.append(
            dataclasses.replace(
                chunk,
                data=image.data,
                width=image.width,
                height=image.height,
                sha256=hashlib.sha256(image.data).hexdigest(),
                meta={**chunk.meta, "original_width": image.original_width,
                      "original_height": image.original_height},
            )
        )
    document = doc.replace(chunks=tuple(chunks))
    return document.with_meta(image_failures=failures) if failures else document

