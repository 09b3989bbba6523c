"""A long local build's progress (issue 32, finding 6): one line per interval
from the build, with records read, images fetched and their rate, and no line
from any worker. The server holds half of the images until the test has seen
a line that counts the other half: no sleeps, no wall-clock limit."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from tests.beam_services import python_env
from tests.generated import mmc4_documents, write_mmc4
from tests.servers import ImageServer, image_bytes

pytestmark = [pytest.mark.slow, pytest.mark.integration]


def test_a_build_prints_one_progress_line_per_interval_and_no_worker_lines(
    tmp_path, tokenizer_path
):
    server = ImageServer()
    docs = mmc4_documents(40, server.base)
    opened = threading.Event()

    def held(handler) -> None:
        opened.wait(timeout=600)
        handler.send_body(200, image_bytes(48, 48, handler.path), "image/jpeg")

    for doc in docs[20:]:
        for info in doc["image_info"]:
            server.route(info["raw_url"][len(server.base) :], held)
    args = [
        "build", "mmc4-pairs", "--input", write_mmc4(str(tmp_path / "docs.jsonl"), docs),
        "--output", str(tmp_path / "out"), "--tokenizer", tokenizer_path,
        "--allow-private-urls", "--workers", "2", "--progress-every", "0.2",
        "--seq-len", "64", "--tokens-per-image", "4", "--image-size", "32",
        "--read-timeout", "600", "--total-timeout", "600",
    ]  # fmt: skip
    lines = []
    with server:
        build = subprocess.Popen(
            [sys.executable, "-m", "cli.main", *args],
            env=python_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            for line in build.stderr:
                lines.append(line.rstrip("\n"))
                # the unheld images are counted while the build waits for the rest (a build
                # whose lines never count them is let go after 25 lines, and fails below)
                if "images fetched" in line or len(lines) == 25:
                    break
        finally:
            opened.set()
            out, err = build.communicate(timeout=600)
    lines += err.splitlines()
    assert build.returncode == 0, err
    assert lines and all(line.startswith("  … ") for line in lines), lines
    seen = next(line for line in lines if "images fetched" in line)
    assert "records read (all of the input)" in seen and "% ok, " in seen
    assert "Funnel (pairs): input 80, kept 80" in out
