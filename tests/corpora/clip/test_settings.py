from __future__ import annotations

import pytest

from corpora import clip
from tests.clip_model import TINY_NAME, tiny_clip  # noqa: F401  (tiny_clip is a fixture)


def test_a_config_that_is_not_open_clip_is_refused(tmp_path):
    path = tmp_path / "odd.json"
    path.write_text('{"layers": 3}')
    with pytest.raises(clip.ClipModelError, match="is not an open_clip config"):
        clip.clip_settings(str(path), None)


def test_settings_record_the_checkpoint_and_validate_options(tiny_clip):  # noqa: F811
    settings = clip.clip_settings(tiny_clip.config_path, tiny_clip.checkpoint, top_fraction=0.3)
    assert settings.model == TINY_NAME and len(settings.checkpoint_sha256) == 64
    assert settings.model_id == f"{TINY_NAME}/tiny.pt"
    assert clip.ClipSettings("ViT-L-14", "openai").model_id == "ViT-L-14/openai"
    with pytest.raises(clip.ClipModelError, match=r"--clip-top-fraction must be in \(0, 1\]"):
        clip.clip_settings(tiny_clip.config_path, tiny_clip.checkpoint, top_fraction=1.5)
    with pytest.raises(clip.ClipModelError, match="--min-clip-sim is a cosine similarity"):
        clip.clip_settings(tiny_clip.config_path, tiny_clip.checkpoint, min_sim=2.0)
