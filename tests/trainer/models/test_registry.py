"""The registry builds every model it names, each a TrainableModel shaped by the data; a
name it does not know is refused with the names it knows."""

from __future__ import annotations

import pytest

from trainer.blend import DataSpec
from trainer.config import ConfigError, option_fields
from trainer.models.registry import MODELS, Images, TrainableModel, model

SPEC = DataSpec(
    seq_len=96,
    pad_id=0,
    image_token_id=1000,
    tokens_per_image=16,
    image_size=(64, 64),
    max_images=2,
    tokenizer_sha256="ab",
    vocab_size=1000,
)


def _settings(name: str, tiny_lm, tiny_vision) -> dict:
    """A small configuration of each registered model; a new entry needs one here."""
    return {
        "prefixlm": {"size": "tiny"},
        "vila": {
            "lm": tiny_lm,
            "vision": tiny_vision.config,
            "vision_pretrained": tiny_vision.checkpoint,
        },
    }[name]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_registry_builds_each_model_shaped_by_the_data(name, tiny_lm, tiny_vision):
    entry = model(name)
    config = entry.configure(**_settings(name, tiny_lm, tiny_vision))
    asked: list[Images] = []

    def open_data(images: Images) -> DataSpec:
        asked.append(images)
        return SPEC

    built = entry.build(config, open_data, meta=False)
    assert isinstance(built, TrainableModel)
    assert built.objective == entry.objective
    assert len(asked) == 1 and asked[0].size == built.image_size
    assert built.image_token_id == SPEC.image_token_id
    assert built.vocab_size >= SPEC.vocab_size
    assert built.max_positions is None or built.max_positions >= SPEC.seq_len
    assert entry.title(config).startswith(("PrefixLM", "VILA"))
    assert entry.recipe(config).lr > 0


def test_an_unknown_name_is_refused_with_the_names_known():
    with pytest.raises(ConfigError) as raised:
        model("llava")
    assert str(raised.value) == "unknown model 'llava' (one of prefixlm, vila)"


@pytest.mark.parametrize("name", sorted(MODELS))
def test_smoke_sets_flags_of_the_model_s_configuration(name):
    entry = MODELS[name]
    assert entry.name == name and entry.config.model == name
    assert set(entry.smoke) <= {f.name for f in option_fields(entry.config)}


def test_prefixlm_needs_the_tokenizer_s_vocabulary():
    from dataclasses import replace

    entry = model("prefixlm")
    config = entry.configure(size="tiny")
    with pytest.raises(ConfigError, match="do not give the tokenizer's vocab_size"):
        entry.build(config, lambda images: replace(SPEC, vocab_size=None))
