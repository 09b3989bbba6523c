"""Training configurations: frozen dataclasses built by functions, each with a ``smoke`` variant.

A run is a model configuration plus a :class:`TrainConfig` (steps, batch,
optimizer, checkpoints). The functions below give the papers' settings:

    >>> prefixlm_config("base").width, prefixlm_config("base").encoder_layers
    (768, 12)
    >>> prefixlm_config("base").tokens_per_image  # 224 px through three ResNet stages: 14 x 14
    196
    >>> prefixlm_config("tiny").tokens_per_image  # as `corpora build --smoke` makes: 16 per image
    16
    >>> prefixlm_optim().lr, prefixlm_optim().warmup, prefixlm_optim().decay
    (0.0005, 0.02, 'linear')
    >>> vila_optim(0).lr, vila_optim(1).lr
    (0.001, 5e-05)
    >>> smoke(train_config(steps=500_000, batch_size=32)).steps
    20

The CLI maps flags onto these; nothing else builds them.
"""

from __future__ import annotations

import dataclasses
import os
from typing import ClassVar, Literal

SIZES = ("tiny", "base", "large")
# what blend weights count: samples, documents (each packed segment: SimVLM's
# examples), images, non-padding tokens
WEIGHT_UNITS = ("examples", "documents", "images", "tokens")
PROJECTORS = ("linear", "mlp2x_gelu")
PRECISIONS = ("auto", "bf16", "fp32")
DEVICES = ("auto", "cpu", "cuda", "xla")
STRATEGIES = ("auto", "ddp", "fsdp")
DECAYS = ("linear", "cosine")
# attention over packed documents: per-document SDPA calls (every device but XLA), FlexAttention
# (CUDA), or a dense L x L mask (sdpa, eager: the reference, and XLA's)
ATTENTIONS = ("varlen", "flex", "sdpa", "eager")
PREFIXLM_ATTENTIONS = ("varlen", "flex", "dense")  # PrefixLM's own layers: one dense way


class ConfigError(ValueError):
    """A setting that cannot work; the message is one line for the user."""


@dataclasses.dataclass(frozen=True)
class PrefixLMConfig:
    """SimVLM's encoder-decoder, trained from scratch.

    Images pass the first ``stem_stages`` residual stages of a torchvision
    ResNet (its stem conv and max-pool included), then a ``patch_size`` x
    ``patch_size`` convolution cuts the feature map into patches: the grid's
    cell count is :attr:`tokens_per_image`, which a build's
    ``tokens_per_image`` must equal.
    """

    model: ClassVar[str] = "prefixlm"  # its name in trainer.models.registry

    size: str
    width: int
    encoder_layers: int
    decoder_layers: int
    heads: int
    mlp_dim: int
    dropout: float
    image_size: int
    stem: Literal["resnet18", "resnet50", "resnet101"]
    stem_stages: int
    patch_size: int
    attention: str = "varlen"  # varlen, flex (CUDA) or dense (the L x L reference; XLA)
    init: str | None = None  # a checkpoint whose trained weights start this run

    def __post_init__(self) -> None:
        if self.attention not in PREFIXLM_ATTENTIONS:
            raise ConfigError(
                f"attention must be one of {', '.join(PREFIXLM_ATTENTIONS)}, got {self.attention!r}"
            )
        if self.width % self.heads:
            raise ConfigError(f"width {self.width} is not a multiple of heads {self.heads}")
        if not 1 <= self.stem_stages <= 3:
            raise ConfigError(f"stem_stages must be 1, 2 or 3, got {self.stem_stages}")
        if self.image_size % (self.stem_stride * self.patch_size):
            raise ConfigError(
                f"image size {self.image_size} is not a multiple of the stem's stride "
                f"{self.stem_stride} x patch size {self.patch_size}"
            )

    @property
    def stem_stride(self) -> int:
        """The ResNet stem (conv and max-pool) divides by 4, each later stage by 2."""
        return 4 * 2 ** (self.stem_stages - 1)

    @property
    def grid(self) -> int:
        return self.image_size // (self.stem_stride * self.patch_size)

    @property
    def tokens_per_image(self) -> int:
        return self.grid**2


def prefixlm_config(size: str = "base", **changes) -> PrefixLMConfig:
    """The named sizes: ``base`` and ``large`` follow SimVLM (12+12 layers at width 768,
    24+24 at 1024; ResNet stem of three stages on 224 px images); ``tiny`` is for tests."""
    if size not in SIZES:
        raise ConfigError(f"unknown PrefixLM size {size!r} (one of {', '.join(SIZES)})")
    shapes = {
        # width, encoder and decoder layers, heads, MLP
        "tiny": (64, 2, 2, 4, 256),
        "base": (768, 12, 12, 12, 3072),
        "large": (1024, 24, 24, 16, 4096),
    }
    width, encoder_layers, decoder_layers, heads, mlp_dim = shapes[size]
    if size == "tiny":
        image = {"image_size": 64, "stem": "resnet18", "stem_stages": 1, "patch_size": 4}
    else:
        image = {"image_size": 224, "stem": "resnet50", "stem_stages": 3, "patch_size": 1}
    config = PrefixLMConfig(
        size=size,
        width=width,
        encoder_layers=encoder_layers,
        decoder_layers=decoder_layers,
        heads=heads,
        mlp_dim=mlp_dim,
        # T5.1.1 turned dropout off for pre-training; a corpus seen about once needs none
        dropout=0.0,
        **image,
    )
    return dataclasses.replace(config, **changes)


@dataclasses.dataclass(frozen=True)
class VilaConfig:
    """VILA: a decoder-only LM, a frozen CLIP vision tower, a projector between them.

    ``lm`` is a local Hugging Face model directory (weights loaded), or a
    ``config.json`` / a directory holding only one (random weights, for
    benchmarks and tests). ``vision`` is an open_clip architecture name or
    the path of an open_clip model config; ``vision_pretrained`` a local
    checkpoint of it. ``stage`` 0 trains the projector; 1 the projector and the LM.
    """

    model: ClassVar[str] = "vila"  # its name in trainer.models.registry

    lm: str
    vision: str
    vision_pretrained: str | None = None
    projector: str = "linear"
    stage: int = 0
    attn_implementation: str = "varlen"  # see ATTENTIONS
    init: str | None = None  # a checkpoint whose trained weights start this run (stage 0 → 1)
    activation_checkpointing: bool = False  # recompute the LM's layers in backward: less memory

    def __post_init__(self) -> None:
        if self.projector not in PROJECTORS:
            raise ConfigError(
                f"unknown projector {self.projector!r} (one of {', '.join(PROJECTORS)})"
            )
        if self.stage not in (0, 1):
            raise ConfigError(
                f"stage must be 0 (projector) or 1 (projector and LM), got {self.stage}"
            )
        if self.attn_implementation not in ATTENTIONS:
            raise ConfigError(
                f"attn_implementation must be one of {', '.join(ATTENTIONS)}, "
                f"got {self.attn_implementation!r}"
            )


def vila_config(
    lm: str, vision: str, vision_pretrained: str | None = None, **changes
) -> VilaConfig:
    return VilaConfig(lm=lm, vision=vision, vision_pretrained=vision_pretrained, **changes)


@dataclasses.dataclass(frozen=True)
class OptimConfig:
    """AdamW with linear warmup over ``warmup`` (a fraction of the steps) to ``lr``,
    then ``decay`` to ``lr * final_lr_fraction``; gradients clipped to ``clip_norm``."""

    lr: float
    warmup: float
    decay: str
    weight_decay: float
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    clip_norm: float = 1.0
    final_lr_fraction: float = 0.0

    def __post_init__(self) -> None:
        if self.lr <= 0:
            raise ConfigError(f"learning rate must be positive, got {self.lr}")
        if not 0 <= self.warmup < 1:
            raise ConfigError(f"warmup is a fraction of the steps in [0, 1), got {self.warmup}")
        if self.decay not in DECAYS:
            raise ConfigError(f"unknown decay {self.decay!r} (one of {', '.join(DECAYS)})")


def prefixlm_optim(**changes) -> OptimConfig:
    """SimVLM: AdamW (0.9, 0.999), weight decay 0.01, 2% warmup to 5e-4, then linear decay."""
    return dataclasses.replace(
        OptimConfig(lr=5e-4, warmup=0.02, decay="linear", weight_decay=0.01), **changes
    )


def vila_optim(stage: int, **changes) -> OptimConfig:
    """VILA's recipe: 1e-3 to align the projector (stage 0), 5e-5 for pre-training (stage 1);
    3% warmup, cosine decay, no weight decay."""
    lr = {0: 1e-3, 1: 5e-5}[stage]
    return dataclasses.replace(
        OptimConfig(lr=lr, warmup=0.03, decay="cosine", weight_decay=0.0), **changes
    )


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """The loop's settings. ``batch_size`` is sequences per rank per micro-step; an
    optimizer step sees ``batch_size * accumulate * world_size`` sequences."""

    steps: int
    batch_size: int
    optim: OptimConfig
    accumulate: int = 1
    seed: int = 0
    precision: str = "auto"  # bf16 autocast on accelerators, fp32 on the CPU
    device: str = "auto"
    strategy: str = "auto"  # DDP; FSDP2 for VILA's LM on CUDA
    log_every: int = 10
    checkpoint_every: int = 1000
    keep_checkpoints: int = 3
    output: str | None = None
    resume: bool = False
    compile: bool = False  # torch.compile each layer the model shards (flex or dense attention)
    peak_tflops: float | None = None  # per device, for MFU; default: known CUDA GPUs' bf16

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "accumulate", "log_every", "checkpoint_every"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.precision not in PRECISIONS:
            raise ConfigError(
                f"unknown precision {self.precision!r} (one of {', '.join(PRECISIONS)})"
            )
        if self.device not in DEVICES:
            raise ConfigError(f"unknown device {self.device!r} (one of {', '.join(DEVICES)})")
        if self.strategy not in STRATEGIES:
            raise ConfigError(
                f"unknown strategy {self.strategy!r} (one of {', '.join(STRATEGIES)})"
            )
        if self.resume and self.output is None:
            raise ConfigError("resume needs an output directory to resume from")


def train_config(steps: int, batch_size: int, optim: OptimConfig | None = None, **changes):
    return TrainConfig(
        steps=steps, batch_size=batch_size, optim=optim or prefixlm_optim(), **changes
    )


def smoke(config: TrainConfig) -> TrainConfig:
    """A run a laptop finishes in a minute: 20 steps of 2 sequences, a line every 5."""
    return dataclasses.replace(
        config,
        steps=20,
        batch_size=2,
        accumulate=1,
        log_every=5,
        checkpoint_every=min(config.checkpoint_every, 10),
    )


# What `corpora train vila --smoke` trains when --lm and --vision are not given: a tiny
# Llama and an open_clip ViT of random weights (trainer/data/README.md), sized for a
# `corpora build --smoke` build (vocabulary 1,000, 16 tokens per image, seq_len 256).
SMOKE_DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
SMOKE_LM = os.path.join(SMOKE_DATA, "tiny-llama")
SMOKE_VISION = os.path.join(SMOKE_DATA, "corpora-tiny-vit.json")
