"""VILA: a decoder-only LM, a frozen CLIP vision tower and a projector between them.

- The LM is a Hugging Face causal LM (Llama-2 style), loaded from a local
  directory with ``transformers``, or built with random weights from a
  ``config.json`` (benchmarks, tests).
- The vision tower is an open_clip ViT; each image becomes the patch tokens
  of its penultimate layer, the CLS token dropped (as LLaVA and VILA take
  ``hidden_states[-2][:, 1:]``). It never trains and stays in eval mode.
- The projector maps each patch to the LM's width: ``linear`` (the VILA
  paper's choice) or ``mlp2x_gelu`` (LLaVA-1.5's). Its outputs replace the
  image slots of ``input_ids``, so the tower's patch count must equal the
  build's ``tokens_per_image``.
- Attention stays inside each packed document, and the LM gets the
  per-document ``position_ids`` for its rotary positions. ``varlen`` (the
  default) runs each document through SDPA alone (``trainer.models.attention``),
  ``flex`` gives the LM's FlexAttention a block mask from the segment ids
  (CUDA); neither makes an ``L × L`` tensor. ``sdpa`` and ``eager`` give it a
  4-D boolean mask (causal, same document; ``eager`` gets it additive): the
  reference, and the way on XLA, which wants fixed shapes.
- ``stage`` 0 trains the projector only; 1 the projector and the LM.

The loss is the cross-entropy of ``labels`` (already the next token; -100
where there is none), summed, a chunk of positions at a time
(``trainer.models.loss``).
"""

from __future__ import annotations

import os

import torch
from torch import nn

from corpora.config.extras import missing_extra
from trainer.config import ConfigError, VilaConfig
from trainer.models.attention import (
    document_block_mask,
    document_causal_mask,
    segment_runs,
    varlen_attend,
)
from trainer.models.flops import attention_flops, forward_flops, matmul_parameters
from trainer.models.loss import IGNORE_INDEX, chunked_cross_entropy
from trainer.models.meta import has_safetensors, materialize, meta_lm
from trainer.models.slots import image_features, place_images

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")
VARLEN = "corpora_varlen"  # the name our per-document attention is registered under
# the trainer's attention settings, by the name transformers knows each under
HF_ATTENTION = {"varlen": VARLEN, "flex": "flex_attention", "sdpa": "sdpa", "eager": "eager"}


def varlen_lm_attention(
    module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs
):
    """transformers' attention interface over :func:`varlen_attend`: the document runs
    come as the ``document_runs`` keyword the model passes down through its layers; called
    without them (the LM on its own), each row is one document. It keeps no cache: an
    export names ``sdpa`` for generation."""
    batch, length = query.shape[0], query.shape[2]
    if key.shape[2] != length:
        raise ValueError("varlen attention has no key-value cache: generate with sdpa")
    out = varlen_attend(
        query,
        key,
        value,
        kwargs.get("document_runs") or [[(1, 0, length)]] * batch,
        causal=True,
        padding_sees_itself=True,
        scale=scaling,
    )
    return out.transpose(1, 2).contiguous(), None


def register_varlen() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(VARLEN, varlen_lm_attention)


def _one_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def load_lm(path: str, attn_implementation: str = "sdpa", meta: bool = False) -> nn.Module:
    """A causal LM from a local model directory (its weights), or random weights from a
    ``config.json`` or a directory that holds only one; ``attn_implementation`` is one of
    :data:`HF_ATTENTION`'s keys. With ``meta``, a directory of safetensors weights gives the
    LM on the meta device, its weights read later, each process its part
    (``trainer.models.meta``)."""
    try:
        from transformers import AutoConfig, AutoModelForCausalLM
        from transformers.utils import logging as hf_logging
    except ImportError as exc:  # named here, not as a traceback from inside a run
        raise missing_extra("train", "VILA", exc) from None

    hf_logging.disable_progress_bar()  # the run prints its own lines
    register_varlen()
    attn_implementation = HF_ATTENTION[attn_implementation]
    if not os.path.exists(path):
        raise ConfigError(f"LM not found: {path} (a local model directory or config.json)")
    has_weights = os.path.isdir(path) and any(
        os.path.exists(os.path.join(path, name)) for name in WEIGHT_FILES
    )
    try:
        if meta and has_safetensors(path):
            return meta_lm(path, attn_implementation)
        if has_weights:
            return AutoModelForCausalLM.from_pretrained(
                path, attn_implementation=attn_implementation, dtype=torch.float32
            )
        config = AutoConfig.from_pretrained(path)
        return AutoModelForCausalLM.from_config(
            config, attn_implementation=attn_implementation, dtype=torch.float32
        )
    except (OSError, ValueError, KeyError) as exc:
        raise ConfigError(f"cannot load the LM from {path}: {_one_line(exc)}") from None


def load_vision(vision: str, pretrained: str | None) -> nn.Module:
    """The visual half of an open_clip model: ``vision`` is an architecture name or the path
    of a model config (its file stem names the architecture); ``pretrained`` a local
    checkpoint file or an open_clip tag (which downloads)."""
    try:
        import open_clip
    except ImportError as exc:
        raise missing_extra("train", "VILA", exc) from None

    name = vision
    if vision.endswith(".json") or os.path.isfile(vision):
        if not os.path.isfile(vision):
            raise ConfigError(f"vision config not found: {vision}")
        open_clip.add_model_config(vision)
        name = os.path.splitext(os.path.basename(vision))[0]
    if name not in open_clip.list_models():
        raise ConfigError(f"unknown open_clip architecture {name!r}")
    if pretrained is not None and not os.path.isfile(pretrained):
        if pretrained not in open_clip.list_pretrained_tags_by_model(name):
            raise ConfigError(
                f"vision weights not found: {pretrained} (a local checkpoint file, or an "
                f"open_clip tag of {name})"
            )
    try:  # open_clip takes a checkpoint path or a tag; OpenAI's weights were trained with QuickGELU
        model = open_clip.create_model(
            name, pretrained=pretrained, force_quick_gelu=pretrained == "openai"
        )
    except Exception as exc:  # open_clip raises RuntimeError, KeyError, ... for a bad file
        raise ConfigError(
            f"cannot load vision tower {name} from {pretrained}: {_one_line(exc)}"
        ) from None
    visual = model.visual
    visual.preprocess_cfg = open_clip.get_model_preprocess_cfg(model)
    return visual


class VisionTower(nn.Module):
    """A frozen open_clip ViT: images ``[N, 3, H, W]`` → penultimate-layer patches ``[N, T, D]``."""

    def __init__(self, visual: nn.Module, name: str = "the vision tower"):
        super().__init__()
        self.name = name
        if not hasattr(visual, "transformer") or not hasattr(visual, "grid_size"):
            raise ConfigError(
                "the vision tower must be an open_clip VisionTransformer, "
                f"got {type(visual).__name__}"
            )
        self.visual = visual
        self.layer = len(visual.transformer.resblocks) - 2
        self.width = visual.transformer.width
        self.tokens_per_image = int(visual.grid_size[0] * visual.grid_size[1])
        size = visual.preprocess_cfg["size"]
        self.image_size = size if isinstance(size, int) else int(size[0])
        self.image_mean = tuple(visual.preprocess_cfg["mean"])
        self.image_std = tuple(visual.preprocess_cfg["std"])
        self.requires_grad_(False)
        self.eval()

    def train(self, mode: bool = True) -> VisionTower:
        return super().train(False)  # frozen: dropout and patch dropout stay off

    @torch.no_grad()
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        out = self.visual.forward_intermediates(
            images,
            indices=[self.layer],
            stop_early=True,
            intermediates_only=True,
            output_fmt="NLC",
        )
        return out["image_intermediates"][0]


def make_projector(kind: str, vision_width: int, lm_width: int) -> nn.Module:
    if kind == "linear":
        return nn.Linear(vision_width, lm_width)
    return nn.Sequential(
        nn.Linear(vision_width, lm_width), nn.GELU(), nn.Linear(lm_width, lm_width)
    )


def lm_attention_mask(segment_ids: torch.Tensor, implementation: str, dtype: torch.dtype):
    """``[B, 1, L, L]``: causal within each document. A padding token sees only itself, so
    no row is empty; its label is -100. ``eager`` adds the mask to the scores."""
    length = segment_ids.shape[-1]
    eye = torch.eye(length, dtype=torch.bool, device=segment_ids.device)
    allowed = (document_causal_mask(segment_ids) | eye)[:, None]
    if implementation == "eager":
        return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill(
            ~allowed, torch.finfo(dtype).min
        )
    return allowed


class Vila(nn.Module):
    objective = "vila"
    dense_attention = "sdpa"
    fsdp_preferred = True  # an LM of billions of parameters: shard it across CUDA ranks

    def __init__(
        self,
        lm: nn.Module,
        vision: VisionTower,
        projector: str,
        stage: int,
        image_token_id,
        lm_weights: str | None = None,
    ):
        super().__init__()
        self.lm = lm
        self.lm_weights = lm_weights  # where a meta-device LM's weights are read from
        self.vision = vision
        self.width = lm.config.hidden_size
        self.projector = make_projector(projector, vision.width, self.width)
        self.image_token_id = image_token_id
        self.tokens_per_image = vision.tokens_per_image
        self.image_size = vision.image_size
        self.image_mean, self.image_std = vision.image_mean, vision.image_std
        self.vocab_size = lm.config.vocab_size
        self.max_positions = getattr(lm.config, "max_position_embeddings", None)
        self.image_source = f"the vision tower {vision.name} at {vision.image_size} px"
        by_hf_name = {name: ours for ours, name in HF_ATTENTION.items()}
        self.attention = by_hf_name[lm.config._attn_implementation]
        self.static_shapes = False  # the runtime sets it on XLA
        self.lm.requires_grad_(stage == 1)
        self.lm.config.use_cache = False
        self.flops_counts = (  # LM factor, LM weights, per image: projector and tower
            6 if stage == 1 else 4,
            matmul_parameters(lm),
            6 * matmul_parameters(self.projector) * vision.tokens_per_image
            + forward_flops(vision, (1, 3, vision.image_size, vision.image_size)),
        )

    def train(self, mode: bool = True) -> Vila:
        super().train(mode)
        self.vision.eval()
        return self

    def materialize(self, device: torch.device) -> None:
        """A meta-device LM, once sharded, gets its weights: each process its own rows."""
        if self.lm_weights is not None and any(p.is_meta for p in self.lm.parameters()):
            materialize(self.lm, self.lm_weights, device)

    def shard_layers(self) -> list[nn.Module]:
        """The LM's decoder layers: the units FSDP2 shards."""
        names = set(getattr(self.lm, "_no_split_modules", None) or ())
        return [module for module in self.lm.modules() if type(module).__name__ in names]

    @staticmethod
    def count_targets(batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return (batch["labels"] != IGNORE_INDEX).sum()

    def step_flops(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Training FLOPs of ``batch`` (``trainer.models.flops``): the LM on every real token,
        factor 6 in stage 1 and 4 in stage 0 (no weight gradients); the projector (6) on
        every image patch and the frozen tower's forward on every image."""
        factor, lm, per_image = self.flops_counts
        segments = batch["segment_ids"]
        layers = self.lm.config.num_hidden_layers
        return (
            factor * lm * (segments > 0).sum()
            + attention_flops(segments, layers=layers, width=self.width, factor=factor)
            + per_image * batch["image_mask"].sum()
        )

    def embed(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        ids = batch["input_ids"]
        table = self.lm.get_input_embeddings()
        if self.image_token_id is None:
            return table(ids)
        embeds = table(ids.masked_fill(ids == self.image_token_id, 0))
        if batch["images"].shape[1] == 0:
            return embeds
        features = image_features(
            lambda images: self.projector(self.vision(images)),
            batch["images"],
            batch["image_mask"],
            self.tokens_per_image,
            self.width,
            self.static_shapes,
        )
        return place_images(embeds, ids, self.image_token_id, features)

    def attention_inputs(self, segment_ids: torch.Tensor, dtype: torch.dtype) -> dict:
        """What the LM's attention needs to keep each document to itself."""
        if self.attention == "varlen":
            return {"document_runs": segment_runs(segment_ids)}
        if self.attention == "flex":
            mask = document_block_mask(
                segment_ids, segment_ids, causal=True, padding_sees_itself=True
            )
            return {"attention_mask": mask}
        return {"attention_mask": lm_attention_mask(segment_ids, self.attention, dtype)}

    def hidden_states(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The LM's last hidden states ``[B, L, D]``, before its output projection."""
        embeds = self.embed(batch)
        out = self.lm.base_model(
            inputs_embeds=embeds,
            position_ids=batch["position_ids"],
            use_cache=False,
            **self.attention_inputs(batch["segment_ids"], embeds.dtype),
        )
        return out.last_hidden_state

    def logits(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.lm.get_output_embeddings()(self.hidden_states(batch))

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The summed cross-entropy of ``labels``, never the whole ``[B, L, V]`` at once."""
        return chunked_cross_entropy(
            self.hidden_states(batch),
            self.lm.get_output_embeddings().weight,
            batch["labels"],
            static_shapes=self.static_shapes,
        )


def build_vila(config: VilaConfig, image_token_id: int | None = None, meta: bool = False) -> Vila:
    """VILA as ``config`` names it; with ``meta`` (FSDP2) its LM on the meta device, to be
    given its weights by :meth:`Vila.materialize` once sharded."""
    lm = load_lm(config.lm, config.attn_implementation, meta=meta)
    on_meta = any(p.is_meta for p in lm.parameters())
    name = os.path.splitext(os.path.basename(config.vision))[0]  # a config file names its arch
    tower = VisionTower(load_vision(config.vision, config.vision_pretrained), name)
    if config.activation_checkpointing:
        # non-reentrant: works with frozen layers (stage 0) and with FSDP2
        kwargs = {"use_reentrant": False}
        if hasattr(lm, "activation_checkpointing_enable"):  # transformers 5's name
            lm.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        else:
            lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    return Vila(
        lm,
        tower,
        config.projector,
        config.stage,
        image_token_id,
        lm_weights=config.lm if on_meta else None,
    )
