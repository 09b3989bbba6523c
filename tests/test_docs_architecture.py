"""docs/architecture.md has a line for every module of the packages."""

import os
import re

from tests.helpers import REPO

DOC = open(os.path.join(REPO, "docs", "architecture.md"), encoding="utf-8").read()


def _section(package: str) -> str:
    return DOC.split(f"## {package}/", 1)[1].split("\n## ", 1)[0]


def test_every_module_has_its_line():
    missing = []
    for package in ("corpora", "pipelines", "cli"):
        section = _section(package)
        listed = set(re.findall(r"^\| `([^`]+)` \|", section, re.MULTILINE))
        root = os.path.join(REPO, package)
        for folder, _, files in os.walk(root):
            for name in files:
                if not name.endswith(".py") or name == "__init__.py":
                    continue
                module = os.path.relpath(os.path.join(folder, name), root)
                if module.startswith("sources" + os.sep):
                    ok = "sources/" in listed and f"`{name}`" in section
                else:
                    ok = module.replace(os.sep, "/") in listed
                if not ok:
                    missing.append(f"{package}/{module}")
    assert missing == []


def test_no_line_names_a_module_that_is_gone():
    for package in ("corpora", "pipelines", "cli"):
        for module in re.findall(r"^\| `([^`]+\.py)` \|", _section(package), re.MULTILINE):
            assert os.path.isfile(os.path.join(REPO, package, module)), f"{package}/{module}"
