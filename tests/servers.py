"""A real HTTP image server on loopback for tests.

Routes:
  /img/<w>x<h>/<name>.jpg   a JPEG of that size (colour from the name)
  /png/<w>x<h>/<name>.png   a PNG of that size
  /status/<code>            that status, empty body
  /text/<name>              200 with text/html, not an image
Fault modes (one per failure an image fetch must name):
  /retry-after/<seconds>/<name>.jpg   429 with Retry-After the first time, the image after
  /always/<code>                      that status every time, with Retry-After: 1
  /drip/<interval>/<name>.jpg         headers, then one byte every <interval> seconds
  /reset/<name>.jpg                   half the body, then a TCP reset
  /truncated/<name>.jpg               a JPEG cut short (correct Content-Length for the cut)
  /empty/<name>.jpg                   200, image/jpeg, zero bytes
  /bomb.png                           a valid PNG header declaring 20000 x 20000 pixels
  /loop/<n>                           redirects to itself
  /redirect?to=<url>                  redirects to <url>
  /noai/<name>.jpg                    X-Robots-Tag: noai; the body follows after 3 s
  /slow/<seconds>/<name>.jpg          the image after <seconds> (for concurrency caps)
  /close/<name>.jpg                   the image, then the server closes the kept-alive connection
A route ``/robots.txt`` is not there (404: robots.txt allows everything) unless a test adds it.
``ImageServer(tls=(certfile, keyfile))`` serves https. ``ImageServer(port=N)`` listens on a
fixed port (with SO_REUSEPORT, so two test runs at once share it: every route but the
counters answers the same bytes whichever server takes the connection), for tests whose
output holds the image URLs and must not depend on the port.
The server counts requests in flight and open connections and keeps the
maximum of each (``max_active``, ``max_connections``), and connections opened (``opened``).
Tests can add routes with ``server.route(path, handler)`` where the handler
takes the request handler and writes the whole response.

:class:`ProxyServer` is a forward proxy on loopback (``CONNECT`` tunnels and
absolute-form GETs), which records every request line it is asked.
"""

from __future__ import annotations

import hashlib
import http.client
import http.server
import io
import select
import socket
import struct
import threading
import time
import urllib.parse
import zlib
from typing import Callable

from PIL import Image


def image_bytes(width: int, height: int, name: str, fmt: str = "JPEG") -> bytes:
    colour = tuple(hashlib.sha1(name.encode()).digest()[:3])
    image = Image.new("RGB", (width, height), colour)
    for x in range(0, width, max(1, width // 8)):  # some structure, so JPEGs differ
        for y in range(height):
            image.putpixel((x, y), (255 - colour[0], 255 - colour[1], 255 - colour[2]))
    buffer = io.BytesIO()
    image.save(buffer, fmt)
    return buffer.getvalue()


def png_header_bomb(width: int = 20000, height: int = 20000) -> bytes:
    """A small, valid-looking PNG whose header declares ``width`` x ``height``."""

    def chunk(kind: bytes, payload: bytes) -> bytes:
        return (
            struct.pack(">I", len(payload))
            + kind
            + payload
            + struct.pack(">I", zlib.crc32(kind + payload))
        )

    rows = zlib.compress(b"\0" + b"\0" * (3 * width), 9) * 1
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", rows)
        + chunk(b"IEND", b"")
    )


class ImageServer:
    def __init__(
        self, host: str = "127.0.0.1", tls: tuple[str, str] | None = None, port: int = 0
    ) -> None:
        self.requests: list[str] = []
        self.request_times: list[float] = []
        self.routes: dict[str, Callable] = {}
        self.active = 0
        self.max_active = 0
        self.connections = 0
        self.max_connections = 0
        self.opened = 0
        self._seen: set[str] = set()
        self._lock = threading.Lock()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                with server._lock:
                    server.connections += 1
                    server.opened += 1
                    server.max_connections = max(server.max_connections, server.connections)

            def finish(self) -> None:
                with server._lock:
                    server.connections -= 1
                try:
                    super().finish()
                except OSError:
                    pass

            def do_GET(self) -> None:
                with server._lock:
                    server.requests.append(self.path)
                    server.request_times.append(time.monotonic())
                    server.active += 1
                    server.max_active = max(server.max_active, server.active)
                try:
                    self.respond()
                except OSError:  # the client went away (as it should for opt-outs and caps)
                    self.close_connection = True
                finally:
                    with server._lock:
                        server.active -= 1

            def respond(self) -> None:
                handler = server.routes.get(self.path)
                if handler is not None:
                    handler(self)
                    return
                parts = self.path.strip("/").split("/")
                if self.fault(parts):
                    return
                if parts[0] in ("img", "png") and len(parts) == 3:
                    width, height = (int(v) for v in parts[1].split("x"))
                    fmt = "JPEG" if parts[0] == "img" else "PNG"
                    self.send_body(
                        200,
                        image_bytes(width, height, parts[2], fmt),
                        "image/jpeg" if fmt == "JPEG" else "image/png",
                    )
                elif parts[0] == "status":
                    self.send_body(int(parts[1]), b"", "text/plain")
                elif parts[0] == "text":
                    self.send_body(200, b"<html><body>not an image</body></html>", "text/html")
                else:
                    self.send_body(404, b"not found", "text/plain")

            def fault(self, parts: list[str]) -> bool:
                kind = parts[0].split("?")[0]
                name = parts[-1]
                if kind == "retry-after":
                    with server._lock:
                        first = self.path not in server._seen
                        server._seen.add(self.path)
                    if first:
                        self.send_body(429, b"slow down", "text/plain", {"Retry-After": parts[1]})
                    else:
                        self.send_body(200, image_bytes(64, 64, name), "image/jpeg")
                elif kind == "always":
                    self.send_body(int(parts[1]), b"", "text/plain", {"Retry-After": "1"})
                elif kind == "drip":
                    self.send_response(200)
                    self.send_header("Content-Type", "image/jpeg")
                    self.send_header("Content-Length", "1000")
                    self.end_headers()
                    for _ in range(1000):
                        self.wfile.write(b"\xff")
                        self.wfile.flush()
                        time.sleep(float(parts[1]))
                elif kind == "reset":
                    body = image_bytes(256, 256, name)
                    self.send_response(200)
                    self.send_header("Content-Type", "image/jpeg")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body[: len(body) // 2])
                    self.wfile.flush()
                    self.connection.setsockopt(
                        socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                    )
                    self.connection.close()
                    self.close_connection = True
                elif kind == "truncated":
                    body = image_bytes(256, 256, name)
                    self.send_body(200, body[: len(body) * 2 // 3], "image/jpeg")
                elif kind == "empty":
                    self.send_body(200, b"", "image/jpeg")
                elif kind == "bomb.png":
                    self.send_body(200, png_header_bomb(), "image/png")
                elif kind == "loop":
                    self.send_body(302, b"", "text/plain", {"Location": self.path})
                elif kind == "redirect":
                    target = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)["to"][0]
                    self.send_body(302, b"", "text/plain", {"Location": target})
                elif kind == "noai":
                    body = image_bytes(64, 64, name)
                    self.send_response(200)
                    self.send_header("Content-Type", "image/jpeg")
                    self.send_header("Content-Length", str(len(body)))
                    self.send_header("X-Robots-Tag", "noai")
                    self.end_headers()
                    self.wfile.flush()
                    time.sleep(3)
                    self.wfile.write(body)
                elif kind == "close":  # keep-alive promised, then the server hangs up
                    self.send_body(200, image_bytes(32, 32, name), "image/jpeg")
                    self.close_connection = True
                elif kind == "slow":
                    time.sleep(float(parts[1]))
                    self.send_body(200, image_bytes(32, 32, name), "image/jpeg")
                else:
                    return False
                return True

            def send_body(
                self, status: int, body: bytes, content_type: str, headers: dict | None = None
            ) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(body)

        self.host = host
        server_class = _SharedPortServer if port else http.server.ThreadingHTTPServer
        self.httpd = server_class((host, port), Handler)
        self.httpd.daemon_threads = True
        self.httpd.handle_error = lambda request, client_address: (
            None
        )  # resets are part of the tests
        if tls is not None:  # (certfile, keyfile): serve https
            import ssl

            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.scheme = "https" if tls else "http"
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"

    def url(self, path: str) -> str:
        return self.base + path

    def route(self, path: str, handler: Callable) -> None:
        self.routes[path] = handler

    def __enter__(self) -> "ImageServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class _SharedPortServer(http.server.ThreadingHTTPServer):
    allow_reuse_port = True


class ProxyServer:
    """A forward proxy on loopback: ``CONNECT host:port`` tunnels bytes both
    ways, ``GET http://host:port/path`` is forwarded and its answer relayed.
    ``requests`` holds each request line (``CONNECT 127.0.0.1:443``,
    ``GET http://…``) in arrival order."""

    HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authorization", "transfer-encoding"})

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.requests: list[str] = []
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_CONNECT(self) -> None:
                proxy.requests.append(f"CONNECT {self.path}")
                host, port = self.path.rsplit(":", 1)
                upstream = socket.create_connection((host.strip("[]"), int(port)), timeout=10)
                self.send_response(200, "Connection established")
                self.end_headers()
                self.wfile.flush()
                ends = [self.connection, upstream]
                try:
                    while True:
                        readable, _, _ = select.select(ends, [], [], 10)
                        if not readable:
                            break
                        for end in readable:
                            data = end.recv(65536)
                            if not data:
                                return
                            (upstream if end is self.connection else self.connection).sendall(data)
                finally:
                    upstream.close()
                    self.close_connection = True

            def do_GET(self) -> None:
                proxy.requests.append(f"GET {self.path}")
                parts = urllib.parse.urlsplit(self.path)
                upstream = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=10)
                headers = {
                    key: value
                    for key, value in self.headers.items()
                    if key.lower() not in ProxyServer.HOP_BY_HOP
                }
                target = parts.path + (f"?{parts.query}" if parts.query else "")
                upstream.request("GET", target, headers=headers)
                answer = upstream.getresponse()
                body = answer.read()
                upstream.close()
                self.send_response(answer.status)
                for key, value in answer.getheaders():
                    if key.lower() not in ProxyServer.HOP_BY_HOP | {"content-length"}:
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = http.server.ThreadingHTTPServer((host, 0), Handler)
        self.httpd.daemon_threads = True
        self.httpd.handle_error = lambda request, client_address: None
        self.base = f"http://{host}:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> "ProxyServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def self_signed_cert(directory: str, host: str = "127.0.0.1") -> tuple[str, str]:
    """A throwaway certificate and key for ``host`` (``cryptography`` comes with Beam)."""
    import datetime
    import ipaddress
    import os

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(host))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = os.path.join(directory, "cert.pem"), os.path.join(directory, "key.pem")
    with open(cert_path, "wb") as handle:
        handle.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(key_path, "wb") as handle:
        handle.write(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
    return cert_path, key_path
