"""Headless Chromium driven over the DevTools protocol, with the network off.

Chromium is Debian's ``chromium`` package (``.ci/run`` installs it). It runs
with a fresh profile, a proxy that goes nowhere (loopback included) and the
DevTools network emulation set offline; every console error, uncaught
exception, log error and any request that is not ``file:`` or ``data:`` is
collected for the test to assert on.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from typing import Any

import websocket  # websocket-client, from the dev extra


def chromium_executable() -> str | None:
    return (
        shutil.which("chromium")
        or shutil.which("chromium-browser")
        or shutil.which("google-chrome")
    )


class Browser:
    def __init__(self, timeout: float = 60.0) -> None:
        executable = chromium_executable()
        if executable is None:
            raise RuntimeError(
                "chromium is not installed (./.ci/run installs Debian's chromium package)"
            )
        self._timeout = timeout
        self._profile = tempfile.mkdtemp(prefix="corpora-chromium-")
        self._process = subprocess.Popen(
            [
                executable,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                f"--user-data-dir={self._profile}",
                "--remote-debugging-port=0",
                "--remote-allow-origins=*",
                "--proxy-server=127.0.0.1:9",
                "--proxy-bypass-list=<-loopback>",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-extensions",
                "--no-first-run",
                "--no-default-browser-check",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        port = self._wait_for_port()
        deadline = time.monotonic() + timeout
        while True:
            with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(
                f"http://127.0.0.1:{port}/json/list", timeout=10
            ) as response:
                pages = [t for t in json.load(response) if t.get("type") == "page"]
            if pages or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        if not pages:
            raise RuntimeError("chromium opened no page")
        self._ws = websocket.create_connection(
            pages[0]["webSocketDebuggerUrl"], timeout=timeout, suppress_origin=True
        )
        self._ids = itertools.count(1)
        self.events: list[dict[str, Any]] = []

    def _wait_for_port(self) -> int:
        path = os.path.join(self._profile, "DevToolsActivePort")
        deadline = time.monotonic() + self._timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"chromium exited with {self._process.returncode}")
            if os.path.exists(path):
                with open(path, encoding="utf-8") as handle:
                    first = handle.readline().strip()
                if first:
                    return int(first)
            time.sleep(0.05)
        raise RuntimeError("chromium did not open its DevTools port")

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        message_id = next(self._ids)
        self._ws.send(json.dumps({"id": message_id, "method": method, "params": params}))
        while True:
            message = json.loads(self._ws.recv())
            if message.get("id") == message_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self.events.append(message)

    def wait_for(self, event: str) -> dict[str, Any]:
        for seen in self.events:
            if seen.get("method") == event:
                return seen
        while True:
            message = json.loads(self._ws.recv())
            self.events.append(message)
            if message.get("method") == event:
                return message

    def open(self, url: str, width: int = 1200, height: int = 900) -> None:
        self.events.clear()
        for domain in ("Runtime", "Log", "Page", "Network"):
            self.call(f"{domain}.enable")
        self.call(
            "Network.emulateNetworkConditions",
            offline=True,
            latency=0,
            downloadThroughput=-1,
            uploadThroughput=-1,
        )
        self.call(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )
        self.call("Page.navigate", url=url)
        self.wait_for("Page.loadEventFired")
        self.evaluate("1")  # drain events that arrived with the load

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"evaluate failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions, error log entries, and requests
        that left the page (anything but file: and data:)."""
        found = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                found.append(f"exception: {params['exceptionDetails'].get('text')}")
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                found.append(
                    "console: "
                    + " ".join(
                        str(a.get("value", a.get("description"))) for a in params.get("args", [])
                    )
                )
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                found.append(
                    f"log: {params['entry'].get('text')} {params['entry'].get('url', '')}".strip()
                )
            elif method == "Network.requestWillBeSent":
                url = params["request"]["url"]
                if not url.startswith(("file:", "data:")):
                    found.append(f"request: {url}")
        return found

    def screenshot(self, path: str) -> None:
        """A PNG of the whole page."""
        metrics = self.call("Page.getLayoutMetrics")
        size = metrics.get("cssContentSize") or metrics["contentSize"]
        shot = self.call(
            "Page.captureScreenshot",
            format="png",
            captureBeyondViewport=True,
            clip={"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1},
        )
        with open(path, "wb") as handle:
            handle.write(base64.b64decode(shot["data"]))

    def close(self) -> None:
        try:
            self._ws.close()
        finally:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
