"""Tiny models and a small build, made here (nothing is downloaded).

Test modules import the fixtures they use from here:

- ``tiny_lm``: a randomly initialised Llama saved with ``save_pretrained``, as
  a user's local model directory would be (vocabulary 1000: the bundled
  SentencePiece model's);
- ``tiny_vision``: an open_clip ViT config file (32 px, patch 8: 16 patches)
  and a checkpoint of random weights;
- ``sample_build``: the bundled MMC4 sample built by ``corpora build`` with 16
  tokens per image and sequences of 96 tokens.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from tests.clip_model import TINY_CONFIG, TINY_NAME
from tests.helpers import load_manifest, run_cli

SEQ_LEN, TOKENS_PER_IMAGE, VOCAB = 96, 16, 1000


@dataclasses.dataclass(frozen=True)
class TinyVision:
    config: str  # an open_clip model config; its stem names the architecture
    checkpoint: str


def save_tiny_lm(path: str, vocab_size: int = VOCAB, seed: int = 0) -> str:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
    )
    LlamaForCausalLM(config).save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_lm(tmp_path_factory) -> str:
    return save_tiny_lm(str(tmp_path_factory.mktemp("lm") / "tiny-llama"))


@pytest.fixture(scope="session")
def tiny_vision(tmp_path_factory) -> TinyVision:
    import open_clip
    import torch

    directory = tmp_path_factory.mktemp("vision")
    config = directory / f"{TINY_NAME}.json"
    config.write_text(json.dumps(TINY_CONFIG))
    torch.manual_seed(0)
    model = open_clip.model.CLIP(**TINY_CONFIG)
    checkpoint = str(directory / "tiny-clip.pt")
    torch.save(model.state_dict(), checkpoint)
    return TinyVision(str(config), checkpoint)


def build_sample(output: str, *extra: str) -> dict:
    result = run_cli(
        "build",
        "mmc4",
        "--output",
        output,
        "--seq-len",
        str(SEQ_LEN),
        "--tokens-per-image",
        str(TOKENS_PER_IMAGE),
        "--image-size",
        "64",
        "--samples-per-shard",
        "4",
        "--workers",
        "1",
        *extra,
    )
    assert result.returncode == 0, result.stderr
    return load_manifest(output)


@pytest.fixture(scope="session")
def sample_build(tmp_path_factory) -> str:
    output = str(tmp_path_factory.mktemp("build") / "mmc4")
    manifest = build_sample(output)
    assert manifest["totals"]["images"] > 0 and manifest["vocab_size"] == VOCAB
    return output
