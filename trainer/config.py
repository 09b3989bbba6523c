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

The CLI maps flags onto these; nothing else builds them. A field that is a flag of
``corpora train`` says so in its metadata (:func:`option`: the help text, choices and range);
``cli/train_options.py`` makes the flag from it, with the field's default:

    >>> [f.name for f in option_fields(OptimConfig)]
    ['lr', 'warmup', 'weight_decay', 'clip_norm']
    >>> workers = option_of(dataclasses.fields(DataConfig)[5])
    >>> workers.flag, workers.low, DataConfig.num_workers
    ('--workers', 0, 2)
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, ClassVar, Literal, Sequence

from corpora import MAX_IMAGE_SIZE

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
OBJECTIVES = ("vila", "prefixlm")  # the features a batch carries
# open_clip's OPENAI_DATASET_MEAN / STD: the CLIP towers VILA uses.
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
SEEDS = (0, 2**32 - 1)  # what numpy and torch take


@dataclasses.dataclass(frozen=True)
class Option:
    """How a configuration field appears on the command line: its help text, and what
    click checks (choices, a range ``low``..``high``). ``flag`` defaults to the field's name
    (``batch_size`` → ``--batch-size``); ``kind`` is the type of one value where the field's
    differs (``image_size``: one number, a square)."""

    help: str
    flag: str | None = None
    choices: Sequence[str] | None = None
    low: float | None = None
    high: float | None = None
    metavar: str | None = None
    multiple: bool = False
    required: bool = False
    kind: type | None = None


def option(help: str, **settings: Any) -> dict[str, Option]:
    """The field metadata that makes a field a flag: ``field(metadata=option("…", low=1))``."""
    return {"option": Option(help, **settings)}


def option_of(field: dataclasses.Field) -> Option | None:
    """The field's :class:`Option`, with its flag filled in; None: not a flag."""
    found = field.metadata.get("option")
    if found is None:
        return None
    return dataclasses.replace(found, flag=found.flag or "--" + field.name.replace("_", "-"))


def option_fields(cls: type, exclude: Sequence[str] = ()) -> list[dataclasses.Field]:
    """The fields of ``cls`` that are flags, in their order, but those named in ``exclude``."""
    return [
        f for f in dataclasses.fields(cls) if option_of(f) is not None and f.name not in exclude
    ]


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

    width: int
    encoder_layers: int
    decoder_layers: int
    heads: int
    mlp_dim: int
    dropout: float
    image_size: int = dataclasses.field(
        metadata=option(
            "Pixels per side (tiny 64, base and large 224); the stem's patch count follows and "
            "must equal the build's tokens_per_image.",
            low=1,
            high=MAX_IMAGE_SIZE,
        )
    )
    stem: Literal["resnet18", "resnet50", "resnet101"]
    stem_stages: int
    patch_size: int
    size: str = dataclasses.field(
        default="base",
        metadata=option(
            "base: 12+12 layers at width 768; large: 24+24 at 1024; tiny: for tests.",
            choices=SIZES,
        ),
    )
    attention: str = dataclasses.field(
        default="varlen",
        metadata=option(
            "Attention kept to each packed document: varlen (one SDPA call per document), "
            "flex (FlexAttention, CUDA), or dense (the L x L mask; for XLA).",
            flag="--attn-implementation",
            choices=PREFIXLM_ATTENTIONS,
        ),
    )
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

    lm: str = dataclasses.field(
        metadata=option(
            "A local Hugging Face causal LM directory (Llama-2 style), or a config.json for "
            "random weights. Required, but for --smoke (a tiny random Llama)."
        )
    )
    vision: str = dataclasses.field(
        metadata=option(
            "open_clip architecture (ViT-L-14-336) or the path of an open_clip model config. "
            "Required, but for --smoke (a tiny random ViT, 16 patches at 64 px)."
        )
    )
    vision_pretrained: str | None = dataclasses.field(
        default=None,
        metadata=option(
            "The tower's weights: a local checkpoint file (or an open_clip tag; needs network)."
        ),
    )
    # a run names its stage (the recipe's learning rate follows it): required on the CLI
    stage: int = dataclasses.field(
        default=0,
        metadata=option(
            "0: train the projector only; 1: the projector and the LM.",
            low=0,
            high=1,
            required=True,
        ),
    )
    projector: str = dataclasses.field(
        default="linear",
        metadata=option("linear (VILA) or mlp2x_gelu (LLaVA-1.5).", choices=PROJECTORS),
    )
    init: str | None = dataclasses.field(  # stage 0 → 1
        default=None,
        metadata=option(
            "Start from the trained weights of a checkpoint or an --output (stage 1 from stage 0)."
        ),
    )
    attn_implementation: str = dataclasses.field(
        default="varlen",
        metadata=option(
            "Attention kept to each packed document: varlen (one SDPA call per document), "
            "flex (FlexAttention, CUDA), or the dense per-document mask (sdpa, eager; for XLA).",
            choices=ATTENTIONS,
        ),
    )
    activation_checkpointing: bool = dataclasses.field(
        default=False,
        metadata=option(
            "Recompute the LM's layers in the backward pass: less memory, about a third more "
            "compute."
        ),
    )

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

    # no defaults: each recipe (prefixlm_optim, vila_optim) has its own; a flag not given keeps it
    lr: float = dataclasses.field(metadata=option("Peak learning rate (the recipe's)."))
    warmup: float = dataclasses.field(metadata=option("Warmup, a fraction of the steps."))
    decay: str
    weight_decay: float = dataclasses.field(metadata=option("AdamW's (the recipe's)."))
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    clip_norm: float = dataclasses.field(
        default=1.0, metadata=option("Gradients are clipped to this global norm.")
    )
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
class DataConfig:
    """Everything that shapes the batches (``trainer.loader.Loader`` reads it). ``image_size``
    None: the size the builds stored (224 for a text-only blend); ``pin_memory`` None: when
    CUDA is available. A training run sets ``objective``, ``image_size`` and the image
    normalisation from its model, and ``batch_size`` and ``seed`` from its :class:`TrainConfig`."""

    sources: tuple[tuple[str, float], ...] = dataclasses.field(
        metadata=option(
            "A build directory, its manifest.json, or shard URLs / brace patterns of a build "
            "(local, file://, http(s)://, gs://, s3://, hf://), with an optional weight. "
            "Repeatable (a blend).",
            flag="--data",
            metavar="BUILD_OR_URLS[:WEIGHT]",
            multiple=True,
            required=True,
            kind=str,
        )
    )
    weight_unit: str = dataclasses.field(
        default="examples",
        metadata=option(
            "What the weights count: packed samples, documents (SimVLM's pairs + C4, 8:1), "
            "images (VILA's MMC4 + COYO, 1:1), or non-padding tokens.",
            choices=WEIGHT_UNITS,
        ),
    )
    batch_size: int = dataclasses.field(
        default=8, metadata=option("Samples per batch (per process).", low=1)
    )
    objective: str = dataclasses.field(
        default="vila",
        metadata=option(
            "The features: VILA's next-token labels or SimVLM's encoder/decoder split.",
            choices=OBJECTIVES,
        ),
    )
    seed: int = dataclasses.field(
        default=0,
        metadata=option(
            "Seeds the shard order, the shuffle buffer and the PrefixLM prefix lengths.",
            low=SEEDS[0],
            high=SEEDS[1],
        ),
    )
    num_workers: int = dataclasses.field(
        default=2,
        metadata=option(
            "Loader worker processes per process (the stream splits its shards between them).",
            flag="--workers",
            low=0,
        ),
    )
    image_size: tuple[int, int] | None = dataclasses.field(
        default=None,
        metadata=option(
            "Square size the images are resized to. Default: the size the builds stored.",
            low=1,
            high=MAX_IMAGE_SIZE,
            kind=int,
        ),
    )
    image_mean: tuple[float, float, float] = CLIP_MEAN
    image_std: tuple[float, float, float] = CLIP_STD
    shuffle_buffer: int = dataclasses.field(
        default=1000,
        metadata=option(
            "Samples held per build and worker, one drawn at random per step; 0: shard order.",
            low=0,
        ),
    )
    verify: bool = dataclasses.field(
        default=False,
        metadata=option("Check each shard's sha256 against the manifest before reading it."),
    )
    encoder_len: int | None = dataclasses.field(
        default=None,
        metadata=option(
            "PrefixLM: pack the documents' prefixes into encoder rows of this many tokens, "
            "with --decoder-len (`corpora train data --objective prefixlm` suggests both). "
            "Default: one sample a row, both streams seq_len long.",
            low=1,
        ),
    )
    decoder_len: int | None = dataclasses.field(
        default=None,
        metadata=option(
            "PrefixLM: pack the documents' targets into decoder rows of this many tokens, "
            "with --encoder-len.",
            low=1,
        ),
    )
    pin_memory: bool | None = None
    prefetch_factor: int = 2

    def __post_init__(self) -> None:
        if not self.sources:
            raise ValueError("sources: give at least one build")
        locations = [location for location, _ in self.sources]
        if len(set(locations)) != len(locations):
            raise ValueError("sources: a build is listed twice; give it one weight")
        if self.weight_unit not in WEIGHT_UNITS:
            raise ValueError(f"weight_unit must be one of {', '.join(WEIGHT_UNITS)}")
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}")
        if self.batch_size < 1 or self.num_workers < 0 or self.shuffle_buffer < 0:
            raise ValueError("batch_size must be >= 1, num_workers and shuffle_buffer >= 0")
        if self.image_size is not None and (len(self.image_size) != 2 or min(self.image_size) < 1):
            raise ValueError(f"image_size must be (H, W), got {self.image_size}")
        if len(self.image_mean) != 3 or len(self.image_std) != 3 or min(self.image_std) <= 0:
            raise ValueError("image_mean and image_std need 3 channels, std > 0")
        if (self.encoder_len is None) != (self.decoder_len is None):
            raise ValueError("encoder_len and decoder_len: give both (packed PrefixLM) or neither")
        if self.packed and min(self.encoder_len, self.decoder_len) < 1:  # type: ignore[type-var]
            raise ValueError("encoder_len and decoder_len must be >= 1")

    @property
    def packed(self) -> bool:
        """PrefixLM's encoder and decoder streams packed to their own lengths."""
        return self.encoder_len is not None


def data_config(sources: Sequence[str | tuple[str, float]], **settings: Any) -> DataConfig:
    """A :class:`DataConfig` from builds given as ``location`` (weight 1) or
    ``(location, weight)``; an int ``image_size`` means a square.

    >>> data_config(["out/coyo", ("out/mmc4", 2)], image_size=336).sources
    (('out/coyo', 1.0), ('out/mmc4', 2.0))
    """
    pairs = tuple(
        (source, 1.0) if isinstance(source, str) else (str(source[0]), float(source[1]))
        for source in sources
    )
    size = settings.pop("image_size", None)
    if isinstance(size, int):
        size = (size, size)
    return DataConfig(sources=pairs, image_size=tuple(size) if size else None, **settings)


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """The loop's settings. ``batch_size`` is sequences per rank per micro-step; an
    optimizer step sees ``batch_size * accumulate * world_size`` sequences."""

    steps: int = dataclasses.field(metadata=option("Optimizer steps.", low=1))
    batch_size: int = dataclasses.field(
        default=8, metadata=option("Sequences per process per micro-step.", low=1)
    )
    optim: OptimConfig = dataclasses.field(default_factory=prefixlm_optim)
    accumulate: int = dataclasses.field(
        default=1, metadata=option("Micro-steps per optimizer step.", low=1)
    )
    seed: int = dataclasses.field(
        default=0,
        metadata=option("Data order, initial weights and dropout.", low=SEEDS[0], high=SEEDS[1]),
    )
    precision: str = dataclasses.field(
        default="auto",
        metadata=option(
            "auto: bf16 autocast on CUDA and TPU, fp32 on the CPU.", choices=PRECISIONS
        ),
    )
    device: str = dataclasses.field(
        default="auto",
        metadata=option(
            "auto: a TPU when torch_xla is installed and PJRT_DEVICE is set, else CUDA when "
            "there is a GPU, else the CPU.",
            choices=DEVICES,
        ),
    )
    strategy: str = dataclasses.field(
        default="auto",
        metadata=option(
            "Under torchrun: auto is FSDP2 for VILA on CUDA, DDP otherwise.", choices=STRATEGIES
        ),
    )
    log_every: int = dataclasses.field(default=10, metadata=option("Steps per log line.", low=1))
    checkpoint_every: int = dataclasses.field(
        default=1000,
        metadata=option("Steps between checkpoints (one is written at the end too).", low=1),
    )
    keep_checkpoints: int = dataclasses.field(
        default=3, metadata=option("How many of the newest checkpoints are kept.", low=1)
    )
    output: str | None = dataclasses.field(
        default=None,
        metadata=option(
            "Directory or gs:// / s3:// URL for checkpoints. Default: none are written."
        ),
    )
    resume: bool = dataclasses.field(
        default=False, metadata=option("Continue from the latest checkpoint in --output.")
    )
    compile: bool = dataclasses.field(  # each layer the model shards: one graph, reused
        default=False,
        metadata=option(
            "torch.compile each layer (VILA: the LM's decoder layers); needs "
            "--attn-implementation flex or the dense one."
        ),
    )
    peak_tflops: float | None = dataclasses.field(  # per device
        default=None,
        metadata=option(
            "The device's peak TFLOP/s for the MFU in the log line. Default: known CUDA GPUs' "
            "dense bf16 rate (H100, H200, A100, L4, A10); elsewhere no MFU."
        ),
    )

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
