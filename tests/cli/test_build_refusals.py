"""What a newcomer's first mistakes give (issue 32): a refusal that one flag
lifts is not remembered by the next build, and a build that keeps nothing
says why and exits 1."""

from __future__ import annotations

import pytest

from corpora.bundled_sample import SAMPLE_IMAGES, materialize_sample
from tests.helpers import load_manifest, run_cli

pytestmark = [pytest.mark.slow, pytest.mark.integration]

QUICK = ("--workers", "1", "--progress-every", "0", "--seq-len", "256", "--tokens-per-image", "16")


@pytest.fixture()
def sample(tmp_path) -> str:
    """The bundled sample's documents: 9 pairs, 8 images present, through file:// URLs."""
    return materialize_sample(str(tmp_path / "sample"))


def test_allowing_local_files_on_the_second_build_into_one_output_fetches_them(sample, tmp_path):
    output = str(tmp_path / "out")
    run_cli("build", "mmc4-pairs", "--input", sample, "--output", output, *QUICK)
    assert load_manifest(output)["images"]["failed"] == {"local_file": 9}
    allowed = ("--allow-local-files", SAMPLE_IMAGES, "--overwrite")
    again = run_cli("build", "mmc4-pairs", "--input", sample, "--output", output, *QUICK, *allowed)
    assert again.returncode == 0, again.stderr
    images = load_manifest(output)["images"]
    assert (images["ok"], images["failed"]) == (8, {"file_not_found": 1})
