"""What `corpora build` prints: its own lines; library noise only with -v (issue 18).

A ``sitecustomize`` module on the test's PYTHONPATH makes every process of the
build (the command and its worker processes) log a warning and raise a
Python warning when it imports Beam, as Beam itself does where an optional
GCP client is missing; a plain build must show neither, a ``-v`` build must.
"""

from __future__ import annotations

import os
import re

import pytest

from corpora.config.bundled_sample import SAMPLE_IMAGES, materialize_sample
from tests.helpers import load_manifest, run_cli

pytestmark = [pytest.mark.slow, pytest.mark.integration]

NOISE = "simulated library noise"
NOISY_SITE = f'''
import importlib.abc, logging, sys, warnings


class Noisy(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "apache_beam":
            sys.meta_path.remove(self)
            logging.warning("{NOISE}: apitools not found")
            warnings.warn("{NOISE}: a UserWarning")
        return None


sys.meta_path.insert(0, Noisy())
'''
# A line another library would print: a log record (default or corpora's format) or a warning.
FOREIGN = re.compile(r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL)[: ]|Warning: ")


@pytest.fixture
def noisy_env(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(NOISY_SITE)
    return {"PYTHONPATH": str(site)}


def smoke_build(tmp_path, *extra: str, verbose=False, env=None, workers: str = "2"):
    """``corpora [-v] build mmc4-pairs`` of the bundled sample, then ``extra``."""
    sample = materialize_sample(str(tmp_path / "input"))
    output = str(tmp_path / "out")
    result = run_cli(
        *(["-v"] if verbose else []),
        "build",
        "mmc4-pairs",
        "--input",
        sample,
        "--output",
        output,
        "--smoke",
        "--workers",
        workers,
        "--progress-every",
        "0.001",
        "--allow-local-files",  # the sample's images are local files
        SAMPLE_IMAGES,
        *extra,
        env=env,
    )
    return result, output


def test_a_plain_build_prints_only_corpora_s_lines(tmp_path, noisy_env):
    result, output = smoke_build(tmp_path, env=noisy_env)
    assert result.returncode == 0, result.stderr
    printed = result.stdout.splitlines() + result.stderr.splitlines()
    assert [line for line in printed if NOISE in line or FOREIGN.search(line)] == []
    assert load_manifest(output)["funnel"]["kept"] == 8
    # the build's own progress gets through; no worker prints its own (issue 32, finding 6)
    assert any(line.startswith("  … ") for line in result.stderr.splitlines())
    assert not any(line.startswith("fetch[pid ") for line in result.stderr.splitlines())
    assert result.stdout.startswith("Building mmc4-pairs")


def test_minus_v_shows_what_libraries_say(tmp_path, noisy_env):
    result, _ = smoke_build(tmp_path, verbose=True, env=noisy_env)
    assert result.returncode == 0, result.stderr
    assert f"{NOISE}: apitools not found" in result.stderr
    assert f"{NOISE}: a UserWarning" in result.stderr


def test_a_mistyped_flag_is_one_line_and_builds_nothing(tmp_path):
    result, output = smoke_build(tmp_path, "--seq-lenght", "100")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "corpora: no such option: --seq-lenght (did you mean --seq-len?)"
    ]
    assert not os.path.exists(output)


def test_an_unknown_beam_option_after_the_dashes_is_one_line_and_builds_nothing(tmp_path):
    result, output = smoke_build(tmp_path, "--", "--direct_running_mod=multi_threading")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "corpora: unknown Beam option after --: --direct_running_mod (did you mean "
        "--direct_running_mode?); pass options of your own with --custom-beam-option NAME"
    ]
    assert not os.path.exists(output)


def test_a_known_beam_option_and_a_declared_custom_one_reach_beam(tmp_path):
    result, output = smoke_build(
        tmp_path,
        "--custom-beam-option",
        "corpora_test_flag",
        "--",
        "--direct_running_mode=multi_threading",
        "--corpora_test_flag=1",
        workers="1",
    )
    assert result.returncode == 0, result.stderr
    assert load_manifest(output)["funnel"]["kept"] == 8
