"""`corpora fetch`: the download alone, into a store a later build packs
from without a request; and the one-line refusals of the store flags."""

from __future__ import annotations

import gzip
import json
import os

import pytest

from corpora.store import ImageStore
from tests.helpers import SMALL_BUILD, load_manifest, run_cli
from tests.pipelines.test_store import mmc4_input, shards
from tests.servers import ImageServer, ProxyServer

FETCH = ("--allow-private-urls", "--progress-every", "0", "--workers", "1")


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(600)
def test_a_build_after_corpora_fetch_sends_no_request(tmp_path):
    store = str(tmp_path / "store")
    with ImageServer() as server:
        given = mmc4_input(
            str(tmp_path / "docs.jsonl"), server, documents=5, extra=[server.url("/status/404")]
        )
        done = run_cli("fetch", "mmc4", "--input", given, "--image-store", store, *FETCH)
        assert done.returncode == 0, done.stderr
        assert "Images: 11 in" in done.stdout and "10 ok, http_404 1" in done.stdout
        assert "arrived: fetched 11, store 0, img2dataset 0" in done.stdout
        assert sorted(server.requests).count("/robots.txt") == 1 and len(server.requests) == 12
        assert ImageStore.open(store).state("docs.jsonl") == "complete"
        output = str(tmp_path / "out")
        built = run_cli("build", "mmc4", "--input", given, "--output", output, *SMALL_BUILD,
                        "--image-store", store)  # fmt: skip
        assert built.returncode == 0, built.stderr
        assert len(server.requests) == 12  # the build sent none, robots.txt included
        direct = str(tmp_path / "direct")
        again = run_cli("build", "mmc4", "--input", given, "--output", direct, *SMALL_BUILD,
                        "--no-image-store")  # fmt: skip
        assert again.returncode == 0, again.stderr
    assert shards(output) == shards(direct)
    assert load_manifest(output)["images_arrived"] == {"fetched": 0, "store": 11, "img2dataset": 0}


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(600)
def test_corpora_fetch_goes_through_the_proxy_the_environment_names(tmp_path):
    store = str(tmp_path / "store")
    with ImageServer() as server, ProxyServer() as proxy:
        private = "http://10.9.8.7/private.jpg"  # refused by the guard, never sent to the proxy
        given = mmc4_input(str(tmp_path / "docs.jsonl"), server, documents=3, extra=[private])
        urls = [info["raw_url"] for line in open(given) for info in json.loads(line)["image_info"]]
        urls.remove(private)
        env = {"HTTP_PROXY": proxy.base, "http_proxy": proxy.base, "NO_PROXY": "", "no_proxy": ""}
        done = run_cli("fetch", "mmc4", "--input", given, "--image-store", store,
                       "--allow-network", "127.0.0.1/32", "--progress-every", "0",
                       "--workers", "1", env=env)  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert f"{len(urls)} ok" in done.stdout and "blocked_address 1" in done.stdout
    assert sorted(proxy.requests) == sorted(
        [f"GET {server.url('/robots.txt')}"] + [f"GET {url}" for url in urls]
    )
    assert not [line for line in proxy.requests if "10.9.8.7" in line]


def _refused(*args: str) -> str:
    done = run_cli(*args)
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    return done.stderr


@pytest.mark.slow  # six CLI processes: 11 s, the quick tier's longest
def test_store_flags_are_refused_in_one_line(tmp_path):
    given = str(tmp_path / "docs.jsonl")
    with open(given, "w") as handle:
        handle.write("{}\n")
    build = ("build", "mmc4-pairs", "--input", given, "--output", str(tmp_path / "out"))
    assert "needs --image-store" in _refused("fetch", "mmc4", "--input", given)
    assert "contradict" in _refused(*build, "--image-store", "s", "--no-image-store")
    assert "needs an image store" in _refused(*build, "--no-image-store", "--refetch-failures")
    assert "--images-absent needs --images-from" in _refused(*build, "--images-absent", "drop")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "no .tar + .parquet shards" in _refused(*build, "--images-from", str(empty))
    download = tmp_path / "download"
    download.mkdir()
    (download / "00000.tar").write_bytes(b"")
    (download / "00000.parquet").write_bytes(b"")
    message = _refused(*build, "--image-store", str(download))
    assert "read with --images-from, not used as an --image-store" in message
    assert not os.path.exists(download / "store.json")


def test_an_input_the_fetch_finds_truncated_is_one_line_and_exit_2(tmp_path):
    # the same rule as `corpora build`: a worker's unreadable input names the file
    line = json.dumps({"text_list": ["a"], "image_info": [], "url": "http://a.example/"})
    whole = gzip.compress((line + "\n").encode() * 2000)
    path = tmp_path / "docs.jsonl.gz"
    path.write_bytes(whole[: len(whole) // 2])  # its first bytes read well: the check passes
    store = str(tmp_path / "store")
    done = run_cli("fetch", "mmc4", "--input", str(path), "--image-store", store, *FETCH)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"corpora: {path}: Compressed file ended before the end-of-stream marker was reached"
    ]
