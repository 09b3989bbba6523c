"""What a newcomer's first mistakes give (issue 32): a refusal that one flag
lifts is not remembered by the next build, and a build that keeps nothing
says why and exits 1."""

from __future__ import annotations

import pytest

from corpora.config.bundled_sample import SAMPLE_IMAGES, materialize_sample
from tests import fixtures
from tests.helpers import load_manifest, run_cli, write_jsonl

pytestmark = [pytest.mark.slow, pytest.mark.integration]

QUICK = ("--workers", "1", "--progress-every", "0", "--seq-len", "256", "--tokens-per-image", "16")


@pytest.fixture()
def sample(tmp_path) -> str:
    """The bundled sample's documents: 9 pairs, 8 images present, through file:// URLs."""
    return materialize_sample(str(tmp_path / "sample"))


def test_allowing_local_files_on_the_second_build_into_one_output_fetches_them(sample, tmp_path):
    output = str(tmp_path / "out")
    refused = run_cli("build", "mmc4-pairs", "--input", sample, "--output", output, *QUICK)
    assert refused.returncode == 1, refused.stderr
    assert load_manifest(output)["images"]["failed"] == {"local_file": 9}
    allowed = ("--allow-local-files", SAMPLE_IMAGES, "--overwrite")
    again = run_cli("build", "mmc4-pairs", "--input", sample, "--output", output, *QUICK, *allowed)
    assert again.returncode == 0, again.stderr
    images = load_manifest(output)["images"]
    assert (images["ok"], images["failed"]) == (8, {"file_not_found": 1})


def test_file_urls_without_allow_local_files_keep_nothing_exit_1_and_name_the_flag(
    sample, tmp_path
):
    result = run_cli("build", "mmc4-pairs", "--input", sample, "--output", str(tmp_path), *QUICK)
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        "corpora: the build kept nothing: all 9 pairs were dropped as local_file; "
        "add --allow-local-files DIR"
    )
    # --retry-failures alone cannot fetch a file the build may not read
    assert "failed URLs: failures.parquet (local_file: add --allow-local-files DIR)" in (
        result.stdout
    )


def test_loopback_urls_without_allow_private_urls_exit_1_and_name_the_flag(image_server, tmp_path):
    document = {
        "url": "http://page.example/a",
        "text_list": ["A kite."],
        "image_info": [{"raw_url": image_server.url("/img/40x30/k.jpg"), "matched_text_index": 0}],
    }
    source = write_jsonl(str(tmp_path / "docs.jsonl"), [document])
    result = run_cli("build", "mmc4-pairs", "--input", source, "--output", str(tmp_path), *QUICK)
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        "corpora: the build kept nothing: all 1 pairs were dropped as blocked_address; "
        "add --allow-private-urls (or --allow-network CIDR)"
    )


def test_a_c4_file_given_to_mmc4_is_refused_before_the_build_naming_c4(tmp_path):
    source = fixtures.write_c4_json_gz(str(tmp_path), fixtures.c4_lines())
    result = run_cli("build", "mmc4-pairs", "--input", source, "--output", str(tmp_path / "o"))
    assert result.returncode == 2
    assert result.stderr.startswith(f"corpora: {source}: this file looks like C4, not MMC4")
    assert "`corpora build c4`" in result.stderr


def test_a_mistyped_retry_reason_is_refused_with_a_suggestion(sample, tmp_path):
    result = run_cli(
        "build",
        "mmc4-pairs",
        "--input",
        sample,
        "--retry-failures",
        sample,  # never read: the reason is checked first
        "--retry-reason",
        "file_not_foud",
    )
    assert result.returncode == 2
    assert result.stderr == (
        "corpora: --retry-reason file_not_foud: no fetch fails with it "
        "(did you mean file_not_found?)\n"
    )
