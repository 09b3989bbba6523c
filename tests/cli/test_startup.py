"""The commands that do not build start without Beam and torch.

Importing Apache Beam takes seconds (3.4 s on the development machine, most
of ``corpora --help`` before it was kept out), and torch as much again; only
``corpora build`` and the trainer's runs need them. Each command runs here in
a fresh process, as a user runs it, and reports the modules it loaded; no
time is measured (``benchmarks/e2e.py`` measures the start-up).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests import fixtures
from tests.helpers import REPO, run_cli

pytestmark = [pytest.mark.slow, pytest.mark.integration]

HEAVY = ("apache_beam", "torch")

# Runs ``corpora ARGS`` (argv[2:]) and writes its exit status and the heavy
# packages it imported to argv[1], once the command has run.
PROBE = f"""
import json, sys
from cli.main import main
try:
    main(sys.argv[2:], prog_name="corpora")
    status = 0
except SystemExit as exc:
    status = exc.code or 0
loaded = sorted({{name.split(".")[0] for name in sys.modules}} & set({HEAVY!r}))
with open(sys.argv[1], "w") as handle:
    json.dump({{"status": status, "loaded": loaded}}, handle)
"""


def loaded_by(tmp_path, *args: str) -> dict:
    report = str(tmp_path / "probe.json")
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run(
        [sys.executable, "-c", PROBE, report, *args],
        cwd=str(tmp_path),
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    with open(report) as handle:
        return json.load(handle)


@pytest.fixture(scope="module")
def built(tmp_path_factory, tokenizer_path) -> str:
    directory = tmp_path_factory.mktemp("startup")
    fixtures.write_c4_json_gz(str(directory), fixtures.c4_lines(), 0, 1024)
    output = str(directory / "out")
    result = run_cli(
        "build",
        "c4",
        "--input",
        str(directory),
        "--output",
        output,
        "--tokenizer",
        tokenizer_path,
        "--seq-len",
        "64",
        "--tokens-per-image",
        "8",
        "--progress-every",
        "0",
    )
    assert result.returncode == 0, result.stderr
    return output


@pytest.mark.parametrize(
    "args",
    [
        ("--help",),
        ("list",),
        ("build", "--help"),
        ("tokenizer", "--help"),
        ("train", "--help"),
        ("train", "data", "--help"),
        ("train", "prefixlm", "--help"),
        ("train", "vila", "--help"),
    ],
    ids=" ".join,
)
def test_help_and_list_import_neither_beam_nor_torch(tmp_path, args):
    assert loaded_by(tmp_path, *args) == {"status": 0, "loaded": []}


@pytest.mark.parametrize("command", ["inspect", "stats", "report"])
def test_reading_a_build_imports_neither_beam_nor_torch(built, tmp_path, command):
    extra = ("--output", str(tmp_path / "report.html")) if command == "report" else ()
    assert loaded_by(tmp_path, command, built, *extra) == {"status": 0, "loaded": []}


def test_the_probe_sees_beam_where_a_command_imports_it(tmp_path):
    # a build of a missing input stops before it runs, but after the runner's
    # options were parsed: Beam is loaded, and the probe says so
    found = loaded_by(tmp_path, "build", "c4", "--input", str(tmp_path / "none.json.gz"))
    assert found["status"] == 2
    assert "apache_beam" in found["loaded"]
