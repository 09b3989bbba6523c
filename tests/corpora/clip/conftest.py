from __future__ import annotations

import pytest

from corpora import clip
from tests.clip_model import tiny_clip  # noqa: F401  (a fixture)


@pytest.fixture(scope="package")
def model(tiny_clip):  # noqa: F811
    """The tiny architecture with its random weights, loaded once for these tests."""
    return clip.load_clip(
        clip.clip_settings(tiny_clip.config_path, tiny_clip.checkpoint, batch_size=3)
    )
