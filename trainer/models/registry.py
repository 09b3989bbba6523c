"""The models the trainer knows, by name, and what the loop asks of each.

A :class:`Model` entry names a model's configuration dataclass (whose fields
with an ``option`` are its flags), the features its loader makes, its
optimizer recipe and its builder; :func:`model` looks one up, and a name it
does not know is refused with the names it does:

    >>> sorted(MODELS)
    ['prefixlm', 'vila']
    >>> model("prefixlm").config.__name__, model("vila").objective
    ('PrefixLMConfig', 'vila')
    >>> model("clip")
    Traceback (most recent call last):
    ...
    trainer.config.ConfigError: unknown model 'clip' (one of prefixlm, vila)

A builder gets the configuration and ``open_data``: it calls it once with the
image geometry its model takes (:class:`Images`), which starts the loader and
returns the data's spec (vocabulary, ``seq_len``, image token), and shapes the
model by it. PrefixLM knows its geometry from its configuration and takes its
vocabulary from the data; VILA learns its geometry from the vision tower it
loads first.

The loop (``trainer/train.py``) reaches a built model only through
:class:`TrainableModel`. The models' modules import torch; this one does not,
so that ``corpora train --help`` starts without it.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Protocol, runtime_checkable

from trainer.config import (
    SMOKE_LM,
    SMOKE_VISION,
    ConfigError,
    OptimConfig,
    PrefixLMConfig,
    VilaConfig,
    prefixlm_config,
    prefixlm_optim,
    vila_config,
    vila_optim,
)

if TYPE_CHECKING:
    import torch
    from torch import nn

    Batch = dict[str, torch.Tensor]


@runtime_checkable
class TrainableModel(Protocol):
    """What ``trainer/train.py`` uses of a model. Both are ``torch.nn.Module`` s, so
    parameters (those with ``requires_grad`` train, the others stay frozen), ``state_dict``
    and ``train()`` are torch's."""

    objective: str  # the features its batches carry: "vila" or "prefixlm"
    vocab_size: int
    max_positions: int | None  # the longest seq_len it takes; None: no limit
    tokens_per_image: int  # image slots per image: a build's tokens_per_image must equal it
    image_size: int  # pixels per side
    image_source: str  # what makes its image tokens, for messages
    image_token_id: int | None
    attention: str  # over packed documents: varlen, flex or a dense one
    dense_attention: str  # the name of its dense attention (for XLA and --compile)
    fsdp_preferred: bool  # FSDP2 rather than DDP when the strategy is auto

    def __call__(self, batch: Batch) -> torch.Tensor:
        """The loss summed over the batch's target tokens (float32)."""

    def count_targets(self, batch: Batch) -> torch.Tensor:
        """How many tokens the loss sums over."""

    def step_flops(self, batch: Batch) -> torch.Tensor:
        """Training FLOPs of the batch, for MFU."""

    def shard_layers(self) -> list[nn.Module]:
        """The units FSDP2 shards and ``--compile`` compiles."""

    def materialize(self, device: torch.device) -> None:
        """Give weights to what was built on the meta device, once sharded."""

    def parameters(self, recurse: bool = True) -> Iterator[nn.Parameter]: ...

    def named_parameters(self) -> Iterator[tuple[str, nn.Parameter]]: ...

    def state_dict(self) -> dict[str, Any]: ...


@dataclasses.dataclass(frozen=True)
class Images:
    """How a model wants its images: ``size`` pixels square, normalised by ``mean``/``std``."""

    size: int
    mean: tuple[float, float, float]
    std: tuple[float, float, float]


OpenData = Callable[[Images], Any]  # starts the loader, returns its DataSpec


@dataclasses.dataclass(frozen=True)
class Model:
    """One model the trainer can train (``corpora train NAME``)."""

    name: str
    config: type  # its configuration dataclass
    configure: Callable[..., Any]  # keyword settings → a config (the named sizes, recipes)
    objective: str  # the features its loader makes
    recipe: Callable[[Any], OptimConfig]  # the paper's optimizer settings for a config
    title: Callable[[Any], str]  # how the run names it: "PrefixLM base"
    build: Callable[..., TrainableModel]  # (config, open_data, *, meta) → the model
    smoke: Mapping[str, Any]  # configuration --smoke uses for the flags not given


def build_prefixlm(config: PrefixLMConfig, open_data: OpenData, *, meta: bool = False):
    """PrefixLM shaped by the data (vocabulary, ``seq_len``, image token); its weights are
    small enough for every process to hold them, so ``meta`` changes nothing."""
    from trainer.models.prefixlm import IMAGENET_MEAN, IMAGENET_STD, PrefixLM

    spec = open_data(Images(config.image_size, IMAGENET_MEAN, IMAGENET_STD))
    if spec.vocab_size is None:
        raise ConfigError(
            "the data's manifests do not give the tokenizer's vocab_size, which PrefixLM "
            "needs for its embeddings"
        )
    return PrefixLM(
        config, vocab_size=spec.vocab_size, seq_len=spec.seq_len, image_token_id=spec.image_token_id
    )


def build_vila(config: VilaConfig, open_data: OpenData, *, meta: bool = False):
    """VILA as ``config`` names it; with ``meta`` (FSDP2 will shard it) its LM on the meta
    device, each process to read its part once sharded."""
    from trainer.models import vila

    built = vila.build_vila(config, meta=meta)
    spec = open_data(Images(built.image_size, built.image_mean, built.image_std))
    built.image_token_id = spec.image_token_id
    return built


MODELS: dict[str, Model] = {
    entry.name: entry
    for entry in (
        Model(
            name="prefixlm",
            config=PrefixLMConfig,
            configure=prefixlm_config,
            objective="prefixlm",
            recipe=lambda config: prefixlm_optim(),
            title=lambda config: f"PrefixLM {config.size}",
            build=build_prefixlm,
            smoke={"size": "tiny"},
        ),
        Model(
            name="vila",
            config=VilaConfig,
            configure=vila_config,
            objective="vila",
            recipe=lambda config: vila_optim(config.stage),
            title=lambda config: f"VILA stage {config.stage}",
            build=build_vila,
            smoke={"lm": SMOKE_LM, "vision": SMOKE_VISION},
        ),
    )
}


def model(name: str) -> Model:
    """The registry's entry ``name``; one line naming the known ones otherwise."""
    if name not in MODELS:
        raise ConfigError(f"unknown model {name!r} (one of {', '.join(sorted(MODELS))})")
    return MODELS[name]
