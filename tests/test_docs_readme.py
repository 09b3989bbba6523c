"""README.md matches the code: its install lines are those a missing extra
names, it says what the sample holds as the build does, and its "Train on it"
commands run as written (issue 32). ``tests/test_readme_venv.py`` runs the
README's commands in a clean virtual environment, the install included."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys

import pytest

from corpora.config.bundled_sample import sample_contents
from corpora.config.extras import CPU_TORCH_INDEX
from tests.helpers import REPO

README = open(os.path.join(REPO, "README.md"), encoding="utf-8").read()


def section(title: str) -> str:
    """The README's section under ``## title``."""
    return README.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def commands(text: str) -> list[str]:
    """The command lines of the ```bash blocks of ``text`` (a ``\\`` continues a line)."""
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        lines += [line.strip() for line in block.replace("\\\n", " ").splitlines() if line]
    return lines


def test_the_readme_says_how_to_install_the_trainer_with_and_without_a_gpu():
    # issue 32, finding 2
    lines = [line.split("#")[0].strip() for line in README.splitlines()]
    assert "pip install '.[train]'" in lines
    assert f"pip install '.[train]' --extra-index-url {CPU_TORCH_INDEX}" in lines


def test_the_readme_says_what_the_sample_holds_as_the_build_does():
    # issue 32, finding 7: "five documents", then a build of 9 pairs that keeps 8
    text = " ".join(README.split())
    holds = sample_contents(os.path.join(REPO, "corpora", "data", "sample", "docs.jsonl.template"))
    assert holds in text
    images = int(holds.split(" with ")[1].split()[0])
    assert f"the build reads {images} pairs and keeps {images - 1}" in text


@pytest.mark.slow
@pytest.mark.integration
def test_the_train_on_it_commands_run_as_written(tmp_path):
    # issue 32, finding 4: from the samples to a PrefixLM and a VILA run, offline
    pytest.importorskip("torch")
    binaries = tmp_path / "bin"
    binaries.mkdir()
    shim = binaries / "corpora"  # `corpora` is this tree's command line
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m cli.main "$@"\n')
    shim.chmod(shim.stat().st_mode | stat.S_IEXEC)
    env = dict(
        os.environ,
        PATH=f"{binaries}{os.pathsep}{os.environ['PATH']}",
        PYTHONPATH=REPO,
        XDG_CACHE_HOME=str(tmp_path / "cache"),
    )
    lines = commands(section("Train on it"))
    assert len(lines) == 3
    outputs = []
    for line in lines:
        done = subprocess.run(
            ["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, (line, done.stderr[-2000:])
        outputs.append(done.stdout)
    assert "Funnel (documents): input 300, kept 300" in outputs[0]
    for output, model in zip(outputs[1:], ("PrefixLM tiny", "VILA stage 0")):
        assert output.startswith(model) and "step 20/20" in output
        assert "checkpoints: none, nothing is saved (no --output)" in output
