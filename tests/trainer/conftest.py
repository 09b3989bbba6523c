from __future__ import annotations

import pytest

from tests.trainer.builds import make_builds
from tests.trainer.tiny import sample_build, tiny_lm, tiny_vision  # noqa: F401  (model fixtures)


@pytest.fixture(scope="session")
def builds(tmp_path_factory, image_server, tokenizer_path):
    """The trainer tests' builds (``tests/trainer/builds.py``), made once per session."""
    return make_builds(tmp_path_factory, image_server, tokenizer_path)
