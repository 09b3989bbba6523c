"""A missing optional dependency is one line, from one function, naming the
extra as it installs from a clone (issue 32, finding 2)."""

from __future__ import annotations

import os
import re

import pytest

from corpora.config.extras import (
    CPU_TORCH_INDEX,
    EXTRAS,
    MissingExtra,
    missing_extra,
    require_extra,
)
from tests.helpers import REPO, run_cli


def _pyproject_extras() -> set[str]:
    with open(os.path.join(REPO, "pyproject.toml"), encoding="utf-8") as handle:
        section = handle.read().split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    return set(re.findall(r"^([a-z0-9_-]+) = ", section, re.M))


def test_the_extras_are_pyproject_s():
    assert set(EXTRAS) == _pyproject_extras()


def test_the_fix_names_the_extra_to_install_from_the_clone_and_the_cpu_wheel():
    error = missing_extra("train", "the trainer", ModuleNotFoundError(name="torch"))
    assert isinstance(error, ImportError) and "\n" not in str(error)
    assert "pip install '.[train]'" in str(error) and CPU_TORCH_INDEX in str(error)
    with pytest.raises(MissingExtra, match=r"pip install '\.\[s3\]'"):
        require_extra("s3", "an s3:// output", "no_such_module_here")
    with pytest.raises(ValueError, match="no such extra"):
        missing_extra("gpu", "x", ImportError())


def test_no_module_spells_an_install_command_of_its_own():
    # 'corpora[...]' on the public index is another project: every hint comes from missing_extra
    offenders = []
    for package in ("corpora", "pipelines", "cli", "trainer"):
        for folder, _, files in os.walk(os.path.join(REPO, package)):
            for name in files:
                path = os.path.join(folder, name)
                if name.endswith(".py") and path != os.path.join(
                    REPO, "corpora", "config", "extras.py"
                ):
                    with open(path, encoding="utf-8") as handle:
                        if re.search(r"pip install '?corpora\[|pip install '\.\[", handle.read()):
                            offenders.append(os.path.relpath(path, REPO))
    assert offenders == []


@pytest.mark.slow
@pytest.mark.integration
def test_the_trainer_without_torch_is_one_line_naming_the_train_extra(tmp_path):
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    (hidden / "torch.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'torch'\", name='torch')\n"
    )
    result = run_cli(
        "train", "data", "--data", str(tmp_path / "build"), env={"PYTHONPATH": str(hidden)}
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        "corpora: "
        + str(missing_extra("train", "the trainer's loader", ModuleNotFoundError(name="torch")))
    ]
