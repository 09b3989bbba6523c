"""Export a checkpoint for evaluation and fine-tuning outside this trainer.

The model is rebuilt from the settings the checkpoint recorded and given its
trained weights (``trainer.checkpoint.init_weights``), then written as:

**VILA**, the layout of VILA's own checkpoints (``llm/``, ``vision_tower/``,
``mm_projector/`` under one ``config.json``), which LLaVA-style code loads part
by part::

    OUT/config.json           architectures ["LlavaLlamaModel"], the parts' folders, the
                              projector type, image token, tokens per image, the select
                              layer (-2) and feature ("patch": CLS dropped), preprocessing
    OUT/llm/                  the LM: transformers' save_pretrained (config.json with
                              attn_implementation sdpa, model.safetensors); loads with
                              AutoModelForCausalLM.from_pretrained
    OUT/mm_projector/         config.json (type, input and output width) and
                              model.safetensors, keys as VILA names them: layers.weight
                              (linear), layers.0.* and layers.2.* (mlp2x_gelu)
    OUT/vision_tower/         open_clip_config.json (the architecture's open_clip config,
                              quick_gelu set as trained) and model.safetensors (the visual
                              tower's state dict, open_clip's names without "visual.")

The vision tower stays in open_clip's format (not transformers' CLIP): it was
trained as one, and :func:`load_vila` reads it back with open_clip.

**PrefixLM**: ``OUT/config.json`` (the ``PrefixLMConfig`` fields plus
``vocab_size``, ``seq_len``, ``image_token_id``) and ``OUT/model.safetensors``;
:func:`load_prefixlm` rebuilds it.
"""

from __future__ import annotations

import dataclasses
import json
import os

import torch
from torch import nn

from trainer import checkpoint
from trainer.config import ConfigError, PrefixLMConfig, VilaConfig

PROJECTOR_PREFIX = "layers."  # VILA's MultimodalProjector holds its layers as ``layers``


def _save_safetensors(state: dict[str, torch.Tensor], path: str) -> None:
    from safetensors.torch import save_file

    save_file({name: t.detach().contiguous().cpu() for name, t in state.items()}, path)


def _load_safetensors(path: str) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(path)


def _write_json(path: str, value: dict) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(value, handle, indent=1)
        handle.write("\n")


def _read_json(path: str) -> dict:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def trained_model(where: str) -> tuple[nn.Module, dict]:
    """The model a checkpoint (or an output directory: its latest) trained, with its
    weights, and the checkpoint's recorded settings."""
    found = where if checkpoint.is_checkpoint(where) else checkpoint.latest(where)
    if found is None:
        raise ConfigError(f"no checkpoint at {where}")
    settings = checkpoint.read_state(found)["settings"]
    model_settings, shape = settings["model"], settings.get("data")
    if shape is None:
        raise ConfigError(f"{found} records no data shape (written before export existed)")
    if "lm" in model_settings:
        from trainer.models.vila import build_vila

        model = build_vila(VilaConfig(**model_settings), image_token_id=shape["image_token_id"])
    else:
        from trainer.models.prefixlm import PrefixLM

        model = PrefixLM(
            PrefixLMConfig(**model_settings),
            vocab_size=shape["vocab_size"],
            seq_len=shape["seq_len"],
            image_token_id=shape["image_token_id"],
        )
    checkpoint.init_weights(model, found)
    return model.eval(), settings


def export(where: str, output: str) -> str:
    """Write the model of the checkpoint at ``where`` to ``output``; returns what it is."""
    model, settings = trained_model(where)
    os.makedirs(output, exist_ok=True)
    if model.objective == "vila":
        export_vila(model, settings, output)
        return f"VILA stage {settings['model']['stage']}"
    export_prefixlm(model, settings, output)
    return f"PrefixLM {model.config.size}"


def export_vila(model, settings: dict, output: str) -> None:
    import open_clip

    lm_dir, projector_dir, tower_dir = (
        os.path.join(output, name) for name in ("llm", "mm_projector", "vision_tower")
    )
    lm = model.lm
    trained_with = lm.config._attn_implementation
    lm.config._attn_implementation = "sdpa"  # ours is registered in this process only
    try:
        lm.save_pretrained(lm_dir)
    finally:
        lm.config._attn_implementation = trained_with
    os.makedirs(projector_dir, exist_ok=True)
    kind = settings["model"]["projector"]
    _write_json(
        os.path.join(projector_dir, "config.json"),
        {
            "model_type": "v2l_projector",
            "mm_projector_type": kind,
            "mm_hidden_size": model.vision.width,
            "hidden_size": model.width,
        },
    )
    _save_safetensors(
        {PROJECTOR_PREFIX + name: value for name, value in model.projector.state_dict().items()},
        os.path.join(projector_dir, "model.safetensors"),
    )
    os.makedirs(tower_dir, exist_ok=True)
    tower = dict(open_clip.get_model_config(model.vision.name))
    if settings["model"].get("vision_pretrained") == "openai":
        tower["quick_gelu"] = True  # load_vision forced it for OpenAI's weights
    _write_json(
        os.path.join(tower_dir, "open_clip_config.json"),
        {"architecture": model.vision.name, "model_cfg": tower},
    )
    _save_safetensors(
        model.vision.visual.state_dict(), os.path.join(tower_dir, "model.safetensors")
    )
    _write_json(
        os.path.join(output, "config.json"),
        {
            "architectures": ["LlavaLlamaModel"],
            "model_type": "llava_llama",
            "llm_cfg": "llm",
            "vision_tower_cfg": "vision_tower",
            "mm_projector_cfg": "mm_projector",
            "mm_projector_type": kind,
            "mm_vision_select_layer": -2,
            "mm_vision_select_feature": "patch",
            "image_token_id": model.image_token_id,
            "tokens_per_image": model.tokens_per_image,
            "image_size": model.image_size,
            "image_mean": list(model.image_mean),
            "image_std": list(model.image_std),
            "hidden_size": model.width,
            "corpora_settings": settings,
        },
    )


def load_vila(path: str, attn_implementation: str = "sdpa"):
    """The VILA model of an export at ``path`` (LM, tower and projector from their folders)."""
    import open_clip

    from trainer.models.vila import Vila, VisionTower, load_lm

    config = _read_json(os.path.join(path, "config.json"))
    tower_config = _read_json(os.path.join(path, "vision_tower", "open_clip_config.json"))
    name = tower_config["architecture"]
    # open_clip.add_model_config reads a file or folder of configs named after the model
    directory = os.path.join(path, "vision_tower", "open_clip_configs")
    os.makedirs(directory, exist_ok=True)
    _write_json(os.path.join(directory, f"{name}.json"), tower_config["model_cfg"])
    open_clip.add_model_config(directory)
    clip = open_clip.create_model(name, pretrained=None)
    visual = clip.visual
    visual.load_state_dict(
        _load_safetensors(os.path.join(path, "vision_tower", "model.safetensors"))
    )
    visual.preprocess_cfg = open_clip.get_model_preprocess_cfg(clip)
    lm = load_lm(os.path.join(path, "llm"), attn_implementation)
    model = Vila(
        lm,
        VisionTower(visual, name),
        config["mm_projector_type"],
        stage=1,
        image_token_id=config["image_token_id"],
    )
    projector = _load_safetensors(os.path.join(path, "mm_projector", "model.safetensors"))
    model.projector.load_state_dict(
        {name[len(PROJECTOR_PREFIX) :]: value for name, value in projector.items()}
    )
    return model.eval()


def export_prefixlm(model, settings: dict, output: str) -> None:
    _write_json(
        os.path.join(output, "config.json"),
        {
            "architectures": ["PrefixLM"],
            **dataclasses.asdict(model.config),
            "vocab_size": model.vocab_size,
            "seq_len": model.encoder_positions.num_embeddings,
            "image_token_id": model.image_token_id,
            "corpora_settings": settings,
        },
    )
    _save_safetensors(model.state_dict(), os.path.join(output, "model.safetensors"))


def load_prefixlm(path: str):
    """The PrefixLM model of an export at ``path``."""
    from trainer.models.prefixlm import PrefixLM

    config = _read_json(os.path.join(path, "config.json"))
    fields = {f.name for f in dataclasses.fields(PrefixLMConfig)}
    model = PrefixLM(
        PrefixLMConfig(**{k: v for k, v in config.items() if k in fields}),
        vocab_size=config["vocab_size"],
        seq_len=config["seq_len"],
        image_token_id=config["image_token_id"],
    )
    model.load_state_dict(_load_safetensors(os.path.join(path, "model.safetensors")))
    return model.eval()
