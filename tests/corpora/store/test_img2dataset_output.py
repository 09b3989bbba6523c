"""An img2dataset download read as a store: made here by img2dataset itself
against the local image server, then every image read back by reference."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import urllib.request

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from corpora.fetch import Fetcher, FetchSettings
from corpora.store import (
    UNKNOWN,
    Failed,
    ImageReader,
    Img2DatasetOutput,
    Stored,
    StoreError,
    reason_from_img2dataset,
)
from tests.beam_services import python_env


def img2dataset_download(tmp_path, urls: list[str], **options) -> str:
    """Run img2dataset as a user would (its multiprocessing distributor
    spawns workers, so it runs in a process of its own)."""
    source = str(tmp_path / "urls.parquet")
    pq.write_table(
        pa.table({"url": urls, "caption": [f"caption {i}" for i in range(len(urls))]}), source
    )
    output = str(tmp_path / "download")
    arguments = {
        "url_list": source,
        "input_format": "parquet",
        "url_col": "url",
        "caption_col": "caption",
        "output_folder": output,
        "output_format": "webdataset",
        "processes_count": 1,
        "thread_count": 4,
        "number_sample_per_shard": 4,
        "distributor": "multiprocessing",
        "timeout": 10,
        "retries": 0,
        **options,
    }
    script = (
        "import json, sys; from img2dataset import download; download(**json.loads(sys.argv[1]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, json.dumps(arguments)],
        env=python_env(),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return output


def _members(tar_path: str) -> dict[str, bytes]:
    with tarfile.open(tar_path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


@pytest.mark.slow
@pytest.mark.integration
def test_every_image_of_an_img2dataset_download_reads_back(tmp_path, image_server):
    jpegs = [image_server.url(f"/img/{40 + i}x{30 + 2 * i}/i2d-{i}.jpg") for i in range(7)]
    png = image_server.url("/png/50x20/i2d-p.png")
    failures = {
        image_server.url("/status/404"): ("http_404", 404),
        image_server.url("/always/503"): ("http_5xx", 503),
        image_server.url("/text/i2d"): ("not_image", None),
        image_server.url("/noai/i2d.jpg"): ("opted_out", None),
    }
    # originals kept where they are JPEGs already; the PNG is re-encoded as JPEG
    urls = jpegs + [png] + list(failures)
    output = img2dataset_download(tmp_path, urls, resize_mode="no", skip_reencode=True)

    download = Img2DatasetOutput(output)
    assert download.shards == ["00000", "00001", "00002"] and download.incomplete == []
    index = download.index()
    assert len(index) == len(jpegs) + 1 + len(failures)
    assert index.counts() == {"stored": 8, "failed_retryable": 1, "failed_final": 3}

    members = {}
    for shard in download.shards:
        members.update(_members(os.path.join(output, shard + ".tar")))
    rows = {r["url"]: r for shard in download.shards for r in download.rows(shard)}
    settings = FetchSettings(image_size=24, allow_private_urls=True)
    with Fetcher(settings) as fetcher:
        direct = dict(fetcher.fetch(jpegs + [png]))
    with ImageReader() as reader:
        for url in jpegs + [png]:
            found = index.lookup(url)
            assert isinstance(found, Stored), url
            assert reader.read(found.ref) == members[f"{found.key}.jpg"]
            assert (found.format, found.width, found.height) == (
                "JPEG",
                rows[url]["width"],
                rows[url]["height"],
            )
            rebuilt = reader.image(found.ref, settings)
            assert rebuilt.reason is None and (rebuilt.width, rebuilt.height) == (24, 24)
            if url != png:  # an original: packed from it, the bytes of a direct fetch
                with urllib.request.urlopen(url) as response:
                    assert reader.read(found.ref) == response.read()
                assert rebuilt.data == direct[url].data
    for url, (reason, status) in failures.items():
        found = index.lookup(url)
        assert isinstance(found, Failed) and (found.reason, found.status) == (reason, status), url

    # a shard img2dataset did not finish (no _stats.json) is not trusted
    os.remove(os.path.join(output, "00001_stats.json"))
    cut = Img2DatasetOutput(output)
    assert cut.shards == ["00000", "00002"] and cut.incomplete == ["00001"]
    lost = {r["url"] for r in download.rows("00001")}
    assert all(cut.index().lookup(url) is UNKNOWN for url in lost)


def test_a_folder_without_a_download_is_refused(tmp_path):
    with pytest.raises(StoreError, match="no .tar \\+ .parquet shards"):
        Img2DatasetOutput(str(tmp_path))
    (tmp_path / "00000.tar").write_bytes(b"")
    with pytest.raises(StoreError, match="only incomplete shards"):
        Img2DatasetOutput(str(tmp_path))


def test_a_parquet_without_img2datasets_columns_is_refused(tmp_path):
    pq.write_table(pa.table({"url": ["u"]}), str(tmp_path / "00000.parquet"))
    (tmp_path / "00000.tar").write_bytes(b"")
    (tmp_path / "00000_stats.json").write_text("{}")
    with pytest.raises(StoreError, match="no key, status column"):
        Img2DatasetOutput(str(tmp_path)).rows("00000")


@pytest.mark.parametrize(
    "status, message, expected",
    [
        ("failed_to_download", "HTTP Error 429: Too Many Requests", ("http_429", 429)),
        ("failed_to_download", "HTTP Error 500: Internal Server Error", ("http_5xx", 500)),
        ("failed_to_download", "HTTP Error 403: Forbidden", ("http_403", 403)),
        ("failed_to_download", "The read operation timed out", ("timeout", None)),
        (
            "failed_to_download",
            "<urlopen error [Errno -2] Name or service not known>",
            ("dns_error", None),
        ),  # noqa: E501
        (
            "failed_to_download",
            "<urlopen error [SSL: CERTIFICATE_VERIFY_FAILED]>",
            ("tls_error", None),
        ),  # noqa: E501
        (
            "failed_to_download",
            "Use of image disallowed by X-Robots-Tag directive",
            ("opted_out", None),
        ),  # noqa: E501
        (
            "failed_to_download",
            "<urlopen error [Errno 111] Connection refused>",
            ("connection_error", None),
        ),  # noqa: E501
        ("failed_to_download", "hash mismatch", ("connection_error", None)),
        ("failed_to_resize", "Image decoding error", ("not_image", None)),
        ("failed_to_resize", "aspect ratio too large", ("bad_aspect", None)),
        ("failed_to_resize", "image area too large", ("too_many_pixels", None)),
        ("failed_to_resize", "something else", ("decode_error", None)),
    ],
)
def test_img2dataset_messages_become_fetch_reasons(status, message, expected):
    assert reason_from_img2dataset(status, message) == expected
