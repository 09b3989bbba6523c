from __future__ import annotations

import pytest

from corpora import clip
from tests.clip_model import TINY_NAME, tiny_clip  # noqa: F401  (tiny_clip is a fixture)

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.mark.parametrize(
    "model_arg, pretrained, message",
    [
        ("ViT-B-32x", None, "unknown CLIP architecture 'ViT-B-32x' (did you mean ViT-B-32"),
        (
            "ViT-B-32",
            "no-such-tag",
            "unknown pretrained tag 'no-such-tag' for CLIP architecture ViT-B-32 (known tags:",
        ),
    ],
)
def test_unknown_architecture_or_tag_is_one_line(model_arg, pretrained, message):
    with pytest.raises(clip.ClipModelError) as error:
        clip.load_clip(clip.ClipSettings(model=model_arg, pretrained=pretrained))
    assert str(error.value).startswith(message) and "\n" not in str(error.value)


def test_checkpoint_errors_are_one_line(tiny_clip, tmp_path):  # noqa: F811
    with pytest.raises(clip.ClipModelError, match="^CLIP checkpoint not found: .*absent.pt$"):
        clip.clip_settings(tiny_clip.config_path, str(tmp_path / "absent.pt"))
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"this is not a checkpoint")
    with pytest.raises(clip.ClipModelError) as error:
        clip.load_clip(clip.clip_settings(tiny_clip.config_path, str(garbage)))
    assert str(error.value).startswith(
        f"CLIP checkpoint is not readable: {garbage} (not a PyTorch or safetensors state dict: "
    )
    with pytest.raises(clip.ClipModelError) as error:
        clip.load_clip(clip.clip_settings(tiny_clip.config_path, tiny_clip.mismatched))
    message = str(error.value)
    assert message.startswith(
        f"CLIP checkpoint {tiny_clip.mismatched} does not fit architecture {TINY_NAME}: "
    )
    assert "checkpoint [96" in message and "\n" not in message


def test_openai_weights_get_the_quick_gelu_they_were_trained_with():
    assert clip.needs_quick_gelu("ViT-L-14", "openai")
    assert clip.needs_quick_gelu("ViT-B-32", "openai")
    assert not clip.needs_quick_gelu("ViT-L-14-quickgelu", "openai")  # the config has it already
    assert not clip.needs_quick_gelu("ViT-L-14", "laion2b_s32b_b82k")
    assert not clip.needs_quick_gelu("ViT-L-14", None)


def test_cpu_is_used_without_a_gpu_and_cuda_is_refused_there():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        assert clip.resolve_device("auto") == "cuda"
    else:
        assert clip.resolve_device("auto") == "cpu"
        with pytest.raises(clip.ClipModelError, match="torch sees no CUDA GPU"):
            clip.resolve_device("cuda")
