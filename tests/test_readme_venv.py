"""The README's commands, as written, in a clean virtual environment: the
install from a copy of the clone, the first build, a look at it, the
trainer's install and the "Train on it" section end to end (issue 32).

What a user meets that this does not: pip resolving every dependency on the
public index (minutes, and torch's CUDA wheels without the CPU index). The
environment is made with ``--system-site-packages`` and pip is told to use no
index (``PIP_NO_INDEX``) and no build isolation (``PIP_NO_BUILD_ISOLATION=0``:
the installed setuptools builds the wheel), so the dependencies come from
what is installed here and the test runs offline. Everything else is the
user's: the package is built and installed from a copy of the clone, and the
commands run with the environment's ``bin`` first on ``PATH``, in the copy,
without the repository on ``PYTHONPATH``, so ``corpora`` is the installed
entry point reading the installed package and its data (the samples, the
tokenizer, the trainer's tiny models). ``./.ci/run``, the README's second
command, is the test suite itself and is not run here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.helpers import REPO
from tests.test_docs_readme import README, commands, section

pytestmark = [pytest.mark.slow, pytest.mark.integration]

LEFT_BEHIND = (".git", "__pycache__", "*.egg-info", "build", "corpora-out", ".pytest_cache")


def _readme_commands() -> list[str]:
    first = commands(README.split("\n## ", 1)[0])
    assert first[1] == "./.ci/run"
    looks = commands(section("What a build writes"))  # inspect, stats, report
    listing = commands(section("Building your own corpus"))[0]
    assert listing.startswith("corpora list")
    cpu = [line for line in first[2:] if "--extra-index-url" in line]  # the trainer, CPU only
    return [first[0], *looks, listing, *cpu, *commands(section("Train on it"))]


def test_the_readme_s_commands_run_as_written_in_a_clean_virtual_environment(tmp_path):
    pytest.importorskip("torch")  # the trainer's install takes what is installed here
    clone, venv = tmp_path / "corpora", tmp_path / "venv"
    shutil.copytree(REPO, clone, ignore=shutil.ignore_patterns(*LEFT_BEHIND))
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    # the environment's own setuptools (from ensurepip) is older than the one installed here
    subprocess.run([python, "-m", "pip", "uninstall", "-q", "-y", "setuptools"], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(
        PATH=f"{venv / 'bin'}{os.pathsep}{env['PATH']}",
        VIRTUAL_ENV=str(venv),
        PIP_NO_INDEX="1",
        PIP_NO_BUILD_ISOLATION="0",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        XDG_CACHE_HOME=str(tmp_path / "cache"),
    )
    lines = _readme_commands()
    assert lines[0] == "pip install . && corpora build mmc4-pairs"
    outputs = {}
    for line in lines:
        done = subprocess.run(
            ["bash", "-c", line], cwd=clone, env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, (line, done.stdout[-2000:], done.stderr[-2000:])
        outputs[line] = done.stdout
    first = outputs[lines[0]]
    assert "Successfully installed corpora" in first
    assert "Funnel (pairs): input 9, kept 8" in first
    installed = subprocess.run(
        [python, "-c", "import corpora; print(corpora.__file__)"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert installed.startswith(str(venv))  # the installed package, not the copy's sources
    assert (clone / "corpora-out" / "mmc4-pairs" / "report.html").is_file()
    prefixlm, vila = (outputs[line] for line in lines[-2:])
    assert prefixlm.startswith("PrefixLM tiny") and "step 20/20" in prefixlm
    assert vila.startswith("VILA stage 0") and "step 20/20" in vila
