"""The bundled sample's counts reconcile (issue 32, finding 7): the build says
what the sample holds and that one image is missing on purpose, and images
removed from kept documents are in the build's summary and `corpora stats`."""

from __future__ import annotations

import pytest

from tests.helpers import load_manifest, run_cli

pytestmark = [pytest.mark.slow, pytest.mark.integration]

QUICK = ("--smoke", "--workers", "1", "--progress-every", "0")


def test_the_sample_build_says_what_the_sample_holds_and_what_is_missing_on_purpose(tmp_path):
    result = run_cli("build", "mmc4-pairs", *QUICK, cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert (
        "No --input given: building the bundled sample corpus (5 MMC4 documents with 9 images; "
        "missing.jpg is absent on purpose, dropped as file_not_found)"
    ) in result.stdout
    assert "Funnel (pairs): input 9, kept 8" in result.stdout


def test_images_removed_by_min_sim_are_in_the_summary_and_in_stats(tmp_path):
    output = str(tmp_path / "mmc4")
    result = run_cli("build", "mmc4", "--min-sim", "0.3", "--output", output, *QUICK)
    assert result.returncode == 0, result.stderr
    removed = load_manifest(output)["images_removed"]["clip_similarity_below_min"]
    assert removed > 0
    line = f"  images removed from kept documents, clip_similarity_below_min: {removed}"
    assert line in result.stdout.splitlines()
    stats = run_cli("stats", output)
    assert stats.returncode == 0, stats.stderr
    assert any(
        row.split() == ["images", "removed", "clip_similarity_below_min", str(removed)]
        for row in stats.stdout.splitlines()
    )
