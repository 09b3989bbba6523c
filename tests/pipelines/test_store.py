"""Builds through the image store, run as a user runs them (the CLI, real
Beam, the loopback image server and its request log): the three MMC4 layouts
of one input share a store and build offline, a rebuild with other settings
sends no request, a build killed while fetching resumes without fetching
again what the store holds, and --refetch-failures tries only the retryable
failures."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import urllib.parse

import pytest

from corpora.store import ImageStore, Stored
from tests.helpers import REPO, SMALL_BUILD, load_manifest, run_cli, write_jsonl
from tests.servers import ImageServer, image_bytes

pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.timeout(900)]

SENTENCES = [
    "A cup of coffee sits on a wooden table.",
    "The cat sleeps on the windowsill.",
    "Rockets carry satellites into orbit.",
]


def mmc4_input(path: str, server: ImageServer, documents: int, extra: list[str] = ()) -> str:
    """``documents`` MMC4 documents of two images each (their URLs distinct),
    then one document per URL of ``extra`` (a 404, a page that is no image …)."""
    images = [
        [server.url(f"/img/{60 + i % 5}x{48 + j * 7}/d{i}-{j}.jpg") for j in range(2)]
        for i in range(documents)
    ] + [[url] for url in extra]
    rows = [
        {
            "url": f"https://page.example/{i}",
            "text_list": SENTENCES,
            "image_info": [
                {
                    "raw_url": url,
                    "image_name": f"{i}-{j}.jpg",
                    "matched_text_index": j,
                    "matched_sim": 0.3,
                }
                for j, url in enumerate(urls)
            ],
            "similarity_matrix": [
                [0.3 if k == j else 0.2 for k in range(3)] for j in range(len(urls))
            ],
        }
        for i, urls in enumerate(images)
    ]
    return write_jsonl(path, rows)


def build(corpus: str, given: str, output: str, *flags: str) -> dict:
    done = run_cli("build", corpus, "--input", given, "--output", output, *SMALL_BUILD, *flags)
    assert done.returncode == 0, done.stderr
    return load_manifest(output)


def shards(output: str) -> dict[str, bytes]:
    found = {}
    for name in sorted(os.listdir(output)):
        if name.endswith(".tar"):
            with open(os.path.join(output, name), "rb") as handle:
                found[name] = handle.read()
    assert found, f"no shards in {output}"
    return found


def balanced(manifest: dict) -> bool:
    funnel = manifest["funnel"]
    return funnel["input"] == funnel["kept"] + sum(funnel["dropped"].values())


def test_three_layouts_share_one_store_and_build_with_the_server_stopped(tmp_path):
    store = str(tmp_path / "store")
    with ImageServer() as server:
        given = mmc4_input(
            str(tmp_path / "docs.jsonl"),
            server,
            documents=12,
            extra=[server.url("/status/404"), server.url("/text/page")],
        )
        first = build("mmc4", given, str(tmp_path / "mmc4"), "--image-store", store)
        fetched = len(server.requests)
        direct = {
            corpus: build(corpus, given, str(tmp_path / f"direct-{corpus}"), "--no-image-store")
            for corpus in ("mmc4-pairs", "mmc4-reordered")
        }
    assert first["images_arrived"] == {"fetched": 26, "store": 0, "img2dataset": 0}
    assert fetched == 26 + 1  # each URL once, and robots.txt once
    assert ImageStore.open(store).state("docs.jsonl") == "complete"
    for corpus, reference in direct.items():
        output = str(tmp_path / corpus)
        manifest = build(corpus, given, output, "--image-store", store)
        assert shards(output) == shards(str(tmp_path / f"direct-{corpus}"))
        assert manifest["images"] == reference["images"]
        assert manifest["funnel"] == reference["funnel"] and balanced(manifest)
        assert manifest["images_arrived"]["store"] == manifest["images"]["input"]
        assert manifest["images_arrived"]["fetched"] == 0
    assert manifest["images"]["failed"] == {"http_404": 1, "not_image": 1}


def test_rebuilds_with_other_settings_send_no_request(tmp_path, tokenizer_path):
    store = str(tmp_path / "store")
    other = ("--seq-len", "128", "--tokenizer", tokenizer_path, "--image-size", "24")
    other += ("--resize-mode", "keep_ratio", "--tokens-per-image", "6")
    with ImageServer() as server:
        given = mmc4_input(str(tmp_path / "docs.jsonl"), server, documents=8)
        build("mmc4-pairs", given, str(tmp_path / "first"), "--image-store", store)
        before = len(server.requests)
        rebuilt = build(
            "mmc4-pairs", given, str(tmp_path / "rebuilt"), "--image-store", store, *other
        )
        assert len(server.requests) == before  # not one request
        build("mmc4-pairs", given, str(tmp_path / "direct"), "--no-image-store", *other)
    # resized from the stored originals, exactly as from the servers' bodies
    assert shards(str(tmp_path / "rebuilt")) == shards(str(tmp_path / "direct"))
    assert rebuilt["images_arrived"] == {"fetched": 0, "store": 16, "img2dataset": 0}


def _gated(server: ImageServer, open_requests: int):
    """Answer ``open_requests`` requests, then hold every later one until
    released; returns (blocked, release) events."""
    blocked, release = threading.Event(), threading.Event()
    answered = {"n": 0}
    lock = threading.Lock()
    completed: list[str] = []

    def handler(request) -> None:
        path = request.path
        with lock:
            answered["n"] += 1
            wait = answered["n"] > open_requests
        if wait:
            blocked.set()
            release.wait(120)
        name = path.rsplit("/", 1)[-1]
        request.send_body(200, image_bytes(40 + len(name) % 9, 36, name), "image/jpeg")
        completed.append(path)

    return handler, blocked, release, completed


def test_a_build_killed_while_fetching_fetches_nothing_the_store_holds(tmp_path):
    urls = [f"/gated/{i}.jpg" for i in range(60)]
    with ImageServer() as server:
        handler, blocked, release, completed = _gated(server, open_requests=30)
        for path in urls:
            server.route(path, handler)
        rows = [
            {
                "url": f"https://page.example/{i}",
                "text_list": SENTENCES[:1],
                "image_info": [
                    {
                        "raw_url": server.url(path),
                        "image_name": "x",
                        "matched_text_index": 0,
                        "matched_sim": 0.3,
                    }
                ],
            }
            for i, path in enumerate(urls)
        ]
        given = write_jsonl(str(tmp_path / "docs.jsonl"), rows)
        output, store = str(tmp_path / "out"), str(tmp_path / "store")
        command = [sys.executable, "-m", "cli.main", "build", "mmc4-pairs", "--input", given]
        command += ["--output", output, "--image-store", store, *SMALL_BUILD]
        env = {**os.environ, "PYTHONPATH": REPO}
        process = subprocess.Popen(
            command,
            env=env,
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            assert blocked.wait(300), "the build never reached the held requests"
        finally:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            release.set()
        first_run = [path for path in server.requests if path != "/robots.txt"]
        held = ImageStore.open(store).index(["docs.jsonl"])
        kept = {server.url(p) for p in urls} & {
            o.url for o in map(held.lookup, (server.url(p) for p in urls)) if isinstance(o, Stored)
        }
        assert kept, "nothing was committed before the kill: the test shows nothing"
        del server.requests[:]
        resumed = build("mmc4-pairs", given, output, "--image-store", store)
        # robots.txt came from the store: the killed build kept its answer
        assert "/robots.txt" not in server.requests
        second_run = list(server.requests)
        build("mmc4-pairs", given, str(tmp_path / "direct"), "--no-image-store")
    requested_again = {server.url(p) for p in second_run}
    assert not requested_again & kept  # nothing the store held is fetched again
    assert len(second_run) == len(set(second_run))  # and nothing twice in one run
    assert {server.url(p) for p in first_run} | requested_again == {server.url(p) for p in urls}
    assert resumed["images_arrived"]["store"] == len(kept)
    assert resumed["images_arrived"]["fetched"] == len(second_run)
    assert shards(output) == shards(str(tmp_path / "direct"))
    assert balanced(resumed)


def test_refetch_failures_retries_only_the_retryable(tmp_path):
    store = str(tmp_path / "store")
    healthy = {"now": False}

    def flaky(handler):
        if healthy["now"]:
            handler.send_body(200, image_bytes(48, 40, "flaky"), "image/jpeg")
        else:
            handler.send_body(503, b"", "text/plain")

    with ImageServer() as server:
        server.route("/flaky.jpg", flaky)
        failing = [server.url("/flaky.jpg"), server.url("/status/404"), server.url("/noai/n.jpg")]
        given = mmc4_input(str(tmp_path / "docs.jsonl"), server, documents=3, extra=failing)
        flags = ("--image-store", store, "--max-attempts", "1")
        first = build("mmc4-pairs", given, str(tmp_path / "first"), *flags)
        assert first["images"]["failed"] == {"http_5xx": 1, "http_404": 1, "opted_out": 1}
        count = len(server.requests)
        again = build("mmc4-pairs", given, str(tmp_path / "again"), *flags)
        assert len(server.requests) == count  # recorded failures are not tried without the flag
        assert again["images"] == first["images"]
        healthy["now"] = True
        retried = build(
            "mmc4-pairs", given, str(tmp_path / "retried"), *flags, "--refetch-failures"
        )
        assert server.requests[count:] == ["/flaky.jpg"]  # not the 404, never the opt-out
    assert retried["images"]["failed"] == {"http_404": 1, "opted_out": 1}
    assert retried["images_arrived"] == {"fetched": 1, "store": 8, "img2dataset": 0}
    assert len(shards(str(tmp_path / "retried"))) >= len(shards(str(tmp_path / "first")))
    assert (
        json.loads(open(os.path.join(store, "splits", "docs.jsonl", "complete.json")).read())[
            "stored"
        ]
        == 7
    )


def test_a_build_from_an_img2dataset_download_keeps_its_images_without_a_request(tmp_path):
    from tests.corpora.store.test_img2dataset_output import img2dataset_download

    store = str(tmp_path / "store")
    with ImageServer() as server:
        given = mmc4_input(
            str(tmp_path / "docs.jsonl"), server, documents=6, extra=[server.url("/status/404")]
        )
        urls = [info["raw_url"] for line in open(given) for info in json.loads(line)["image_info"]]
        held, absent = urls[:8] + urls[-1:], urls[8:-1]
        # img2dataset keeps the bodies as served: packed from them, a direct fetch's bytes
        download = img2dataset_download(tmp_path, held, resize_mode="no", skip_reencode=True)
        before = len(server.requests)
        dropped = build(
            "mmc4-pairs",
            given,
            str(tmp_path / "dropped"),
            "--images-from",
            download,
            "--images-absent",
            "drop",
            "--no-image-store",
        )
        assert len(server.requests) == before  # not one request
        fetched = build(
            "mmc4-pairs",
            given,
            str(tmp_path / "fetched"),
            "--images-from",
            download,
            "--image-store",
            store,
        )
        assert sorted(server.requests[before:]) == sorted(
            [urllib.parse.urlsplit(u).path for u in absent] + ["/robots.txt"]
        )
        build("mmc4-pairs", given, str(tmp_path / "direct"), "--no-image-store")
    assert dropped["images_arrived"] == {"fetched": 0, "store": 0, "img2dataset": 13}
    assert dropped["images"]["failed"] == {"http_404": 1, "not_in_download": 4}
    assert dropped["funnel"]["dropped"] == {"http_404": 1, "not_in_download": 4}
    assert dropped["funnel"]["kept"] == 8 and balanced(dropped)
    assert fetched["images_arrived"] == {"fetched": 4, "store": 0, "img2dataset": 9}
    assert shards(str(tmp_path / "fetched")) == shards(str(tmp_path / "direct"))
    assert balanced(fetched)
