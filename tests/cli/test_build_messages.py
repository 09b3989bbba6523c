"""What `corpora build` prints reads right for what was built (issue 32,
finding 8): a text corpus's lines say nothing of images, one is singular, and
a mistyped corpus names the closest one; and --smoke sets defaults, never
overriding a flag given beside it (finding 5)."""

from __future__ import annotations

import pytest

from tests import fixtures
from tests.helpers import load_manifest, run_cli

pytestmark = [pytest.mark.slow, pytest.mark.integration]


def test_a_c4_build_prints_no_image_quantities_and_counts_one_as_one(tmp_path):
    source = fixtures.write_c4_json_gz(str(tmp_path), fixtures.c4_lines())
    result = run_cli(
        "build", "c4", "--input", source, "--output", str(tmp_path / "out"), "--progress-every", "0"
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[1] == "  seq_len=2048, tokens_per_shard=2048000"
    assert "Wrote 1 shard, 1 sequence, 5 documents" in lines
    assert not [line for line in lines if line.startswith("Images:")]


@pytest.mark.parametrize("command", ["build", "fetch"])
def test_a_mistyped_corpus_names_the_closest(command):
    result = run_cli(command, "mmc4-pair")
    assert result.returncode == 2
    assert result.stderr == (
        "corpora: Invalid value for 'CORPUS': unknown corpus 'mmc4-pair' (did you mean "
        f"mmc4-pairs? `corpora list` names them) (see corpora {command} --help)\n"
    )


def test_build_smoke_sets_defaults_and_a_flag_given_wins(tmp_path):
    output = str(tmp_path / "out")
    result = run_cli("build", "c4", "--smoke", "--seq-len", "128", "--output", output)
    assert result.returncode == 0, result.stderr
    manifest = load_manifest(output)
    assert (manifest["seq_len"], manifest["tokens_per_image"]) == (128, 16)
    assert manifest["settings"]["samples_per_shard"] == 8
