"""The fetch stage inside real Beam builds: per-image accounting in the
manifest, failures.parquet, retrying exactly the failed URLs, the guard and
progress through the CLI."""

from __future__ import annotations

import dataclasses

import pyarrow.parquet as pq
import pytest

from corpora.config import settings as build_settings
from corpora.fetch.accounting import FAILURES
from pipelines.launch import run_build
from tests.helpers import load_manifest, read_tar, run_cli, write_jsonl
from tests.servers import ImageServer, image_bytes

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture()
def server():
    with ImageServer() as srv:
        yield srv


def mmc4_lines(path: str, image_urls: list[str]) -> str:
    rows = [
        {
            "url": f"https://page.example/{i}",
            "text_list": ["A cup of coffee.", "The cat sleeps."],
            "image_info": [
                {
                    "raw_url": url,
                    "image_name": f"{i}.jpg",
                    "matched_text_index": 1,
                    "matched_sim": 0.3,
                }
            ],
        }
        for i, url in enumerate(image_urls)
    ]
    return write_jsonl(path, rows)


def smoke_settings(
    inputs: str, output: str, tokenizer: str, **fetch_changes
) -> build_settings.BuildSettings:
    settings = build_settings.smoke(
        build_settings.corpus_settings("mmc4-pairs", (inputs,), output, tokenizer=tokenizer)
    )
    fetch = dataclasses.replace(
        settings.fetch,
        **{
            "allow_networks": ("127.0.0.1/32",),
            "read_timeout": 2,
            "backoff_base": 0.05,
            "progress_interval": 0,
            **fetch_changes,
        },
    )
    return settings.replace(fetch=fetch)


def test_accounting_and_retrying_exactly_the_failed_urls(server, tokenizer_path, tmp_path):
    healthy = {"now": False}

    def flaky(handler):
        if healthy["now"]:
            handler.send_body(200, image_bytes(48, 48, "flaky"), "image/jpeg")
        else:
            handler.send_body(404, b"", "text/plain")

    server.route("/flaky.jpg", flaky)
    urls = [
        server.url("/img/80x60/a.jpg"),
        server.url("/img/70x70/b.jpg"),
        server.url("/flaky.jpg"),
        server.url("/noai/n.jpg"),
        server.url("/text/page"),
    ]
    inputs = mmc4_lines(str(tmp_path / "docs.jsonl"), urls)

    first = run_build(smoke_settings(inputs, str(tmp_path / "first"), tokenizer_path))
    assert first["funnel"]["dropped"] == {"http_404": 1, "opted_out": 1, "not_image": 1}
    assert first["funnel"]["kept"] == 2
    assert first["images"] == {
        "input": 5,
        "ok": 2,
        "failures_file": FAILURES,
        "failed": {"http_404": 1, "opted_out": 1, "not_image": 1},
    }
    consent = first["consent"]  # what was honoured, said plainly
    assert (consent["robots_txt"], consent["x_robots_tag"], consent["tdm_reservation"]) == (
        "honoured",
        "honoured",
        "honoured",
    )
    assert consent["tdmrep_json"].startswith("not asked") and consent["robots_token"] == "corpora"
    assert (
        consent["user_agent"].startswith("corpora/") and "contact" not in first["settings"]["fetch"]
    )
    rows = pq.read_table(str(tmp_path / "first" / FAILURES)).to_pylist()
    assert sorted(rows, key=lambda r: r["url"]) == sorted(
        [
            {"url": urls[2], "reason": "http_404", "status": 404, "attempts": 1},
            {"url": urls[3], "reason": "opted_out", "status": 200, "attempts": 1},
            {"url": urls[4], "reason": "not_image", "status": 200, "attempts": 1},
        ],
        key=lambda r: r["url"],
    )

    healthy["now"] = True
    server.requests.clear()
    retry = run_build(
        smoke_settings(
            inputs,
            str(tmp_path / "retry"),
            tokenizer_path,
            retry_failures=str(tmp_path / "first" / FAILURES),
            retry_reasons=("http_404",),
        )
    )
    assert retry["funnel"] == {
        "unit": "pair",
        "input": 5,
        "kept": 1,
        "dropped": {"not_in_retry_list": 4},
    }
    assert retry["images"]["input"] == 1 and retry["images"]["ok"] == 1
    # nothing else was fetched again; robots.txt is asked once per host and build (no store here)
    assert server.requests == ["/robots.txt", "/flaky.jpg"]
    samples = read_tar(str(tmp_path / "retry" / "mmc4-pairs-000000.tar"))
    documents = [d for sample in samples for d in sample["json"]["documents"]]
    assert [img["url"] for d in documents for img in d["images"]] == [urls[2]]
    assert [d["url"] for d in documents] == ["https://page.example/2"]
    assert pq.read_table(str(tmp_path / "retry" / FAILURES)).num_rows == 0  # written, empty


def test_cli_guard_on_sends_no_request_and_shows_progress(server, tokenizer_path, tmp_path):
    urls = [
        server.url("/img/80x60/a.jpg"),
        server.url("/status/500"),
        server.url("/redirect?to=http://169.254.169.254/"),
        "ftp://example.com/x.jpg",
    ]
    inputs = mmc4_lines(str(tmp_path / "docs.jsonl"), urls)
    out = tmp_path / "out"
    result = run_cli(
        "build",
        "mmc4-pairs",
        "--input",
        inputs,
        "--output",
        str(out),
        "--smoke",
        "--tokenizer",
        tokenizer_path,
        "--workers",
        "1",
        "--progress-every",
        "0.001",
    )
    assert result.returncode == 1, result.stderr  # it kept nothing (issue 32, finding 3)
    assert server.requests == [] and server.opened == 0
    manifest = load_manifest(str(out))
    assert manifest["funnel"]["dropped"] == {"blocked_address": 3, "bad_scheme": 1}
    assert manifest["images"]["failed"] == {"blocked_address": 3, "bad_scheme": 1}
    assert "4 images fetched (0.0% ok, " in result.stderr  # the build's progress line
    assert "failures.parquet" in result.stdout
    assert pq.read_table(str(out / FAILURES)).num_rows == 4


def test_cli_bad_fetch_flags_are_one_line_usage_errors(tokenizer_path, tmp_path):
    inputs = mmc4_lines(str(tmp_path / "docs.jsonl"), ["http://example.com/a.jpg"])
    (tmp_path / "not.parquet").write_text("url,reason\n")
    for flags, message in (
        (["--retry-failures", str(tmp_path / "missing.parquet")], "cannot read failures file"),
        (["--retry-failures", str(tmp_path / "not.parquet")], "cannot read failures file"),
        (["--allow-network", "10.0.0.0/99"], "not an IP network"),
    ):
        result = run_cli(
            "build",
            "mmc4-pairs",
            "--input",
            inputs,
            "--output",
            str(tmp_path / "o"),
            "--tokenizer",
            tokenizer_path,
            *flags,
        )
        assert result.returncode == 2, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1 and message in result.stderr


def test_every_fault_in_a_beam_build_balances(server, tokenizer_path, tmp_path):
    """A pair build where each record's image ends in another fetch reason
    (every one there is): the funnel, the manifest's images, failures.parquet
    and stats.json all count the same failures."""
    import json

    from corpora.fetch import REASONS
    from corpora.stats.figures import STATS
    from tests.corpora.fetch.test_scheduler import FAULTS
    from tests.servers import self_signed_cert

    big = b"\xff\xd8" + b"\0" * 300_000  # over the cap below, whatever it holds
    server.route("/big.jpg", lambda handler: handler.send_body(200, big, "image/jpeg"))
    server.route(
        "/robots.txt",
        lambda handler: handler.send_body(200, b"User-agent: *\nDisallow: /private/", "text/plain"),
    )
    server.route(
        "/tdm.jpg",
        lambda handler: handler.send_body(
            200, image_bytes(8, 8, "tdm"), "image/jpeg", {"tdm-reservation": "1"}
        ),
    )
    with (
        ImageServer("127.0.0.2") as other,
        ImageServer(tls=self_signed_cert(str(tmp_path))) as https,
        ImageServer() as down,  # its robots.txt answers 503
    ):
        down.route("/robots.txt", lambda handler: handler.send_body(503, b"", "text/plain"))
        reasons = {server.url(path): reason for path, reason in FAULTS.items()}
        reasons.update(
            {
                server.url("/redirect?to=" + other.url("/img/10x10/o.jpg")): "blocked_address",
                server.url("/redirect?to=file:///etc/passwd"): "bad_redirect",
                server.url("/always/429"): "http_429",
                server.url("/big.jpg"): "too_large",
                server.url("/private/img/8x8/p.jpg"): "robots_disallowed",
                down.url("/img/8x8/d.jpg"): "robots_unavailable",
                server.url("/tdm.jpg"): "tdm_reserved",
                server.url("/img/8x8/tiny.jpg"): "image_too_small",
                server.url("/img/200x20/wide.jpg"): "aspect_ratio_above_max",
                https.url("/img/8x8/tls.jpg"): "tls_error",
                "gopher://example.com/x": "bad_scheme",
                "http:///nohost.jpg": "bad_url",
                "http://nohost.invalid/x.jpg": "dns_error",
                (tmp_path / "missing.jpg").as_uri(): "file_not_found",
                f"{tmp_path}/docs.jsonl/a.jpg": "file_error",  # docs.jsonl is no directory
                "file:///etc/passwd": "local_file",  # outside --allow-local-files
            }
        )
        inputs = mmc4_lines(str(tmp_path / "docs.jsonl"), list(reasons))
        output = tmp_path / "out"
        settings = smoke_settings(
            inputs,
            str(output),
            tokenizer_path,
            read_timeout=0.5,
            total_timeout=3,
            max_bytes=200_000,
            min_image_size=16,
            max_aspect_ratio=4.0,
            allow_local_files=(str(tmp_path),),
        )
        manifest = run_build(settings)
        assert other.requests == []
        assert not [path for path in server.requests if path.startswith("/private/")]
        assert set(down.requests) == {"/robots.txt"}
    failed = [reason for reason in reasons.values() if reason]
    assert set(failed) == set(REASONS) | {"http_404"}  # every way a fetch can fail
    expected = {reason: failed.count(reason) for reason in failed}
    ok = len(reasons) - len(failed)
    assert manifest["funnel"] == {
        "unit": "pair",
        "input": len(reasons),
        "kept": ok,
        "dropped": expected,
    }
    assert manifest["images"]["failed"] == expected and manifest["images"]["ok"] == ok
    assert pq.read_table(str(output / FAILURES)).num_rows == len(failed)
    statistics = json.loads((output / STATS).read_text())["image_fetch"]
    assert statistics["failed"] == len(failed) and statistics["fetched"] == ok
    assert {f["reason"]: f["count"] for f in statistics["failures"]} == expected
