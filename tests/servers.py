"""A real HTTP image server on loopback for tests.

Routes:
  /img/<w>x<h>/<name>.jpg   a JPEG of that size (colour from the name)
  /png/<w>x<h>/<name>.png   a PNG of that size
  /status/<code>            that status, empty body
  /text/<name>              200 with text/html, not an image
Tests can add routes with ``server.route(path, handler)`` where the handler
takes the request handler and writes the whole response.
"""

from __future__ import annotations

import hashlib
import http.server
import io
import threading
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


class ImageServer:
    def __init__(self) -> None:
        self.requests: list[str] = []
        self.routes: dict[str, Callable] = {}
        self._lock = threading.Lock()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                with server._lock:
                    server.requests.append(self.path)
                handler = server.routes.get(self.path)
                if handler is not None:
                    handler(self)
                    return
                parts = self.path.strip("/").split("/")
                if parts[0] in ("img", "png") and len(parts) == 3:
                    width, height = (int(v) for v in parts[1].split("x"))
                    fmt = "JPEG" if parts[0] == "img" else "PNG"
                    self.send_body(200, image_bytes(width, height, parts[2], fmt),
                                   "image/jpeg" if fmt == "JPEG" else "image/png")
                elif parts[0] == "status":
                    self.send_body(int(parts[1]), b"", "text/plain")
                elif parts[0] == "text":
                    self.send_body(200, b"<html><body>not an image</body></html>", "text/html")
                else:
                    self.send_body(404, b"not found", "text/plain")

            def send_body(self, status: int, body: bytes, content_type: str, headers: dict | None = None) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(body)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

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
