"""README.md matches the code: its install lines are those a missing extra names."""

from __future__ import annotations

import os

from corpora.bundled_sample import sample_contents
from corpora.extras import CPU_TORCH_INDEX
from tests.helpers import REPO

README = open(os.path.join(REPO, "README.md"), encoding="utf-8").read()


def test_the_readme_says_how_to_install_the_trainer_with_and_without_a_gpu():
    # issue 32, finding 2
    lines = [line.split("#")[0].strip() for line in README.splitlines()]
    assert "pip install '.[train]'" in lines
    assert f"pip install '.[train]' --extra-index-url {CPU_TORCH_INDEX}" in lines


def test_the_readme_says_what_the_sample_holds_as_the_build_does():
    # issue 32, finding 7: "five documents", then a build of 9 pairs that keeps 8
    text = " ".join(README.split())
    assert sample_contents() in text
    images = int(sample_contents().split(" with ")[1].split()[0])
    assert f"the build reads {images} pairs and keeps {images - 1}" in text
