"""``corpora train …``: check a blend's batches (``data``), pretrain PrefixLM (``prefixlm``) or
VILA (``vila``), export a trained model (``export``).

The commands map flags onto ``trainer`` settings and hold no logic.
"""

from __future__ import annotations

import functools
import logging
import sys

import click
from click.core import ParameterSource

from cli.common import UsageFailure, echo
from corpora import MAX_IMAGE_SIZE
from trainer.config import ATTENTIONS, PREFIXLM_ATTENTIONS, PROJECTORS, SIZES, WEIGHT_UNITS


def parse_source(value: str) -> tuple[str, float]:
    """``BUILD_OR_URLS[:WEIGHT]``: a trailing ``:number`` is the weight (default 1).

    >>> parse_source("gs://bucket/mmc4-pairs:8"), parse_source("out/c4")
    (('gs://bucket/mmc4-pairs', 8.0), ('out/c4', 1.0))
    """
    location, _, weight = value.rpartition(":")
    if location and "/" not in weight:
        try:
            return location, float(weight)
        except ValueError:
            pass
    return value, 1.0


@click.group()
def train() -> None:
    """Train on builds: check a blend's batches first (`data`), then pretrain PrefixLM or VILA."""


@train.command()
@click.option(
    "--data",
    "sources",
    multiple=True,
    required=True,
    metavar="BUILD_OR_URLS[:WEIGHT]",
    help="A build directory, its manifest.json, or shard URLs / brace patterns of a build "
    "(local, file://, http(s)://, gs://, s3://, hf://), with an optional weight. Repeatable.",
)
@click.option(
    "--weight-unit",
    type=click.Choice(WEIGHT_UNITS),
    default="examples",
    show_default=True,
    help="What the weights count: packed samples, documents (SimVLM's 8:1), images "
    "(VILA's 1:1), or non-padding tokens.",
)
@click.option(
    "--batch-size", type=click.IntRange(1), default=4, show_default=True, help="Samples per batch."
)
@click.option(
    "--objective",
    type=click.Choice(["vila", "prefixlm"]),
    default="vila",
    show_default=True,
    help="The features shown: VILA's next-token labels or SimVLM's encoder/decoder split.",
)
@click.option(
    "--batches", type=click.IntRange(0), default=2, show_default=True, help="Batches to print."
)
@click.option(
    "--mix-samples",
    type=click.IntRange(0),
    default=2000,
    show_default=True,
    help="Samples over which the blend's mix is measured (images are not decoded); 0: skip.",
)
@click.option(
    "--seed",
    type=click.IntRange(0, 2**32 - 1),
    default=0,
    show_default=True,
    help="Seeds the shard order, the shuffle buffer and the PrefixLM prefix lengths.",
)
@click.option(
    "--workers",
    type=click.IntRange(0),
    default=0,
    show_default=True,
    help="Loader workers the mix is measured over (the stream splits its shards between them).",
)
@click.option(
    "--image-size",
    type=click.IntRange(1, MAX_IMAGE_SIZE),
    default=None,
    help="Square size the images are resized to. Default: the size the builds stored.",
)
@click.option(
    "--shuffle-buffer",
    type=click.IntRange(0),
    default=1000,
    show_default=True,
    help="Samples held per build and worker, one drawn at random per step; 0: shard order.",
)
@click.option(
    "--verify", is_flag=True, help="Check each shard's sha256 against the manifest before use."
)
def data(
    sources,
    weight_unit,
    batch_size,
    objective,
    batches,
    mix_samples,
    seed,
    workers,
    image_size,
    shuffle_buffer,
    verify,
):
    """Print a blend's first batches readably and measure its mix.

    Before spending GPU hours: which documents and images each row holds,
    where the labels (vila) or the encoder/decoder cut (prefixlm) fall, and
    the share of each build against its weight.
    """
    from trainer.blend import blend_overlaps
    from trainer.describe import describe_batch, describe_mix, describe_spec
    from trainer.loader import Loader, data_config
    from trainer.stream import DataError

    logging.getLogger("trainer").setLevel(logging.WARNING)  # bad shards: one line each
    try:
        config = data_config(
            [parse_source(s) for s in sources],
            weight_unit=weight_unit,
            batch_size=batch_size,
            objective=objective,
            seed=seed,
            num_workers=workers,
            image_size=image_size,
            shuffle_buffer=shuffle_buffer,
            verify=verify,
        )
        loader = Loader(config)
        size = loader.config.image_size or loader.spec.image_size or (224, 224)
        echo(describe_spec(loader.spec, loader.sources, weight_unit, size))
        for line in blend_overlaps(loader.sources):  # duplicates across the blend's builds
            echo(f"corpora: warning: {line}", err=True)
        names = [s.location for s in loader.sources]
        for number, (batch, picks) in enumerate(loader.preview(batches)):
            echo(describe_batch(number, batch, picks, loader.spec, names))
        if mix_samples:
            counts = loader.measure_mix(mix_samples)
            echo(describe_mix(counts, loader.sources, weight_unit, mix_samples))
    except (DataError, ValueError) as exc:
        raise UsageFailure(str(exc)) from None


@train.command("energon-prepare")
@click.argument("build", metavar="BUILD")
def energon_prepare(build):
    """Make a build readable by Megatron-Energon without `energon prepare`.

    Writes BUILD/.nv-meta (shard counts, a train split of every shard,
    CrudeWebdataset) and a .tar.idx beside each shard, from the manifest.
    BUILD is a build directory, local or a URL.
    """
    from trainer.energon import write_energon_meta
    from trainer.stream import DataError

    try:
        written = write_energon_meta(build)
    except (DataError, OSError) as exc:
        raise UsageFailure(str(exc)) from None
    indexes = sum(1 for path in written if path.endswith(".tar.idx"))
    echo(
        f"Wrote {indexes} .tar.idx file(s) and {build.rstrip('/')}/.nv-meta/ "
        "(.info.json, split.yaml, dataset.yaml: CrudeWebdataset)"
    )


def training_options(command):
    """The flags both models share: data, steps and batch, optimizer, devices, checkpoints."""
    options = [
        click.option(
            "--data",
            "sources",
            multiple=True,
            required=True,
            metavar="BUILD_OR_URLS[:WEIGHT]",
            help="A build directory, its manifest.json, or shard URLs of a build, with an "
            "optional weight. Repeatable (a blend).",
        ),
        click.option(
            "--weight-unit",
            type=click.Choice(WEIGHT_UNITS),
            default="examples",
            show_default=True,
            help="What blend weights count (SimVLM's pairs + C4: documents; VILA's MMC4 + "
            "COYO: images).",
        ),
        click.option("--steps", type=click.IntRange(1), default=None, help="Optimizer steps."),
        click.option(
            "--batch-size",
            type=click.IntRange(1),
            default=8,
            show_default=True,
            help="Sequences per process per micro-step.",
        ),
        click.option(
            "--accumulate",
            type=click.IntRange(1),
            default=1,
            show_default=True,
            help="Micro-steps per optimizer step.",
        ),
        click.option("--lr", type=float, default=None, help="Peak learning rate (the recipe's)."),
        click.option("--warmup", type=float, default=None, help="Warmup, a fraction of the steps."),
        click.option("--weight-decay", type=float, default=None, help="AdamW's (the recipe's)."),
        click.option(
            "--clip-norm",
            type=float,
            default=1.0,
            show_default=True,
            help="Gradients are clipped to this global norm.",
        ),
        click.option(
            "--seed",
            type=click.IntRange(0, 2**32 - 1),
            default=0,
            show_default=True,
            help="Data order, initial weights and dropout.",
        ),
        click.option(
            "--workers",
            type=click.IntRange(0),
            default=2,
            show_default=True,
            help="Loader worker processes per training process.",
        ),
        click.option(
            "--shuffle-buffer",
            type=click.IntRange(0),
            default=1000,
            show_default=True,
            help="Samples in each stream's shuffle buffer.",
        ),
        click.option("--verify", is_flag=True, help="Check each shard's sha256 as it is read."),
        click.option(
            "--precision",
            type=click.Choice(["auto", "bf16", "fp32"]),
            default="auto",
            show_default=True,
            help="auto: bf16 autocast on CUDA and TPU, fp32 on the CPU.",
        ),
        click.option(
            "--device",
            type=click.Choice(["auto", "cpu", "cuda", "xla"]),
            default="auto",
            show_default=True,
            help="auto: a TPU when torch_xla is installed and PJRT_DEVICE is set, else CUDA "
            "when there is a GPU, else the CPU.",
        ),
        click.option(
            "--strategy",
            type=click.Choice(["auto", "ddp", "fsdp"]),
            default="auto",
            show_default=True,
            help="Under torchrun: auto is FSDP2 for VILA on CUDA, DDP otherwise.",
        ),
        click.option(
            "--compile",
            "compile_layers",
            is_flag=True,
            help="torch.compile each layer (VILA: the LM's decoder layers); needs "
            "--attn-implementation flex or the dense one.",
        ),
        click.option(
            "--peak-tflops",
            type=float,
            default=None,
            help="The device's peak TFLOP/s for the MFU in the log line. Default: known "
            "CUDA GPUs' dense bf16 rate (H100, H200, A100, L4, A10); elsewhere no MFU.",
        ),
        click.option(
            "--log-every",
            type=click.IntRange(1),
            default=10,
            show_default=True,
            help="Steps per log line.",
        ),
        click.option(
            "--checkpoint-every",
            type=click.IntRange(1),
            default=1000,
            show_default=True,
            help="Steps between checkpoints (one is written at the end too).",
        ),
        click.option(
            "--keep-checkpoints",
            type=click.IntRange(1),
            default=3,
            show_default=True,
            help="How many of the newest checkpoints are kept.",
        ),
        click.option(
            "--output",
            default=None,
            help="Directory or gs:// / s3:// URL for checkpoints. Default: none are written.",
        ),
        click.option(
            "--resume", is_flag=True, help="Continue from the latest checkpoint in --output."
        ),
        click.option(
            "--smoke",
            is_flag=True,
            help="Laptop-sized defaults for the flags not given: 20 steps of 2 sequences, a line "
            "every 5, no loader workers (PrefixLM: tiny).",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def _train_config(flags: dict, optim):
    import dataclasses

    from trainer.config import smoke, train_config

    if flags["steps"] is None and not flags["smoke"]:
        raise UsageFailure("--steps is required (or --smoke)")
    flags = _smoke_defaults(flags)
    changes = {
        name: flags[name] for name in ("lr", "warmup", "weight_decay") if flags[name] is not None
    }
    optim = dataclasses.replace(optim, clip_norm=flags["clip_norm"], **changes)
    config = train_config(
        steps=flags["steps"],
        batch_size=flags["batch_size"],
        optim=optim,
        accumulate=flags["accumulate"],
        seed=flags["seed"],
        precision=flags["precision"],
        device=flags["device"],
        strategy=flags["strategy"],
        log_every=flags["log_every"],
        checkpoint_every=flags["checkpoint_every"],
        keep_checkpoints=flags["keep_checkpoints"],
        output=flags["output"],
        resume=flags["resume"],
        compile=flags["compile_layers"],
        peak_tflops=flags["peak_tflops"],
    )
    if not flags["smoke"]:
        return config
    # the laptop-sized run's values, for every setting the command line left out
    given = {field: getattr(config, field) for field in SMOKE_FIELDS if _given(field)}
    return dataclasses.replace(smoke(config), **given)


# TrainConfig fields that --smoke sets, each also a flag of the same name.
SMOKE_FIELDS = ("steps", "batch_size", "accumulate", "log_every", "checkpoint_every")


def _given(name: str) -> bool:
    """Did the command line (or the environment) give the flag ``name``,
    rather than leave it at its default?"""
    source = click.get_current_context().get_parameter_source(name)
    return source in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)


def _smoke_defaults(flags: dict) -> dict:
    """``flags`` with --smoke's defaults where the command line gave none:
    20 steps, no loader workers, PrefixLM tiny (never over a flag given)."""
    if not flags["smoke"]:
        return flags
    defaults = {"steps": 20, "workers": 0}
    return {**flags, **{name: v for name, v in defaults.items() if not _given(name)}}


def _run(model_config, make_config, flags: dict) -> None:
    from trainer.config import ConfigError

    try:
        config = make_config()
        from trainer.loader import data_config
        from trainer.train import run

        data = data_config(
            [parse_source(source) for source in flags["sources"]],
            weight_unit=flags["weight_unit"],
            num_workers=_smoke_defaults(flags)["workers"],
            shuffle_buffer=flags["shuffle_buffer"],
            verify=flags["verify"],
        )
        run(model_config(), config, data)
    except click.ClickException:
        raise
    except (
        ConfigError,
        ValueError,
        OSError,
        ImportError,
    ) as exc:  # bad settings, blends, paths: one line
        message = str(exc).strip().splitlines()
        line = message[0] if message else type(exc).__name__
        if flags["smoke"] and line.startswith("tokens_per_image mismatch"):
            line += "; --smoke's models take a --smoke build (corpora build CORPUS --smoke)"
        raise UsageFailure(line) from None
    except KeyboardInterrupt:
        echo("corpora: training interrupted", err=True)
        sys.exit(130)
    except Exception as exc:  # the run failed: one line, exit 1
        if logging.getLogger().isEnabledFor(logging.INFO):
            raise
        message = str(exc).strip().splitlines()
        echo(
            f"corpora: training failed: {message[-1] if message else type(exc).__name__}",
            err=True,
        )
        sys.exit(1)


@train.command()
@click.option(
    "--size",
    type=click.Choice(SIZES),
    default="base",
    show_default=True,
    help="base: 12+12 layers at width 768; large: 24+24 at 1024; tiny: for tests.",
)
@click.option(
    "--image-size",
    type=click.IntRange(1, MAX_IMAGE_SIZE),
    default=None,
    help="Pixels per side (tiny 64, base and large 224); the stem's patch count follows and "
    "must equal the build's tokens_per_image.",
)
@click.option(
    "--attn-implementation",
    type=click.Choice(PREFIXLM_ATTENTIONS),
    default="varlen",
    show_default=True,
    help="Attention kept to each packed document: varlen (one SDPA call per document), "
    "flex (FlexAttention, CUDA), or dense (the L x L mask; for XLA).",
)
@training_options
def prefixlm(size, image_size, attn_implementation, **flags):
    """Pretrain SimVLM's PrefixLM from scratch on builds (e.g. image-text pairs + C4, 8:1)."""
    from trainer.config import ConfigError, prefixlm_config, prefixlm_optim

    def model_config():
        changes = {"image_size": image_size} if image_size else {}
        changes["attention"] = attn_implementation
        try:
            smoke_size = flags["smoke"] and not _given("size")
            return prefixlm_config("tiny" if smoke_size else size, **changes)
        except ConfigError as exc:
            raise UsageFailure(str(exc)) from None

    _run(model_config, functools.partial(_train_config, flags, prefixlm_optim()), flags)


@train.command()
@click.option(
    "--lm",
    default=None,
    help="A local Hugging Face causal LM directory (Llama-2 style), or a config.json for "
    "random weights. Required, but for --smoke (a tiny random Llama).",
)
@click.option(
    "--vision",
    default=None,
    help="open_clip architecture (ViT-L-14-336) or the path of an open_clip model config. "
    "Required, but for --smoke (a tiny random ViT, 16 patches at 64 px).",
)
@click.option(
    "--vision-pretrained",
    default=None,
    help="The tower's weights: a local checkpoint file (or an open_clip tag; needs network).",
)
@click.option(
    "--stage",
    type=click.IntRange(0, 1),
    required=True,
    help="0: train the projector only; 1: the projector and the LM.",
)
@click.option(
    "--projector",
    type=click.Choice(PROJECTORS),
    default="linear",
    show_default=True,
    help="linear (VILA) or mlp2x_gelu (LLaVA-1.5).",
)
@click.option(
    "--init",
    default=None,
    help="Start from the trained weights of a checkpoint or an --output (stage 1 from stage 0).",
)
@click.option(
    "--attn-implementation",
    type=click.Choice(ATTENTIONS),
    default="varlen",
    show_default=True,
    help="Attention kept to each packed document: varlen (one SDPA call per document), "
    "flex (FlexAttention, CUDA), or the dense per-document mask (sdpa, eager; for XLA).",
)
@click.option(
    "--activation-checkpointing",
    is_flag=True,
    help="Recompute the LM's layers in the backward pass: less memory, about a third more compute.",
)
@training_options
def vila(
    lm,
    vision,
    vision_pretrained,
    stage,
    projector,
    init,
    attn_implementation,
    activation_checkpointing,
    **flags,
):
    """Pretrain VILA (stage 0: projector; stage 1: projector and LM) on builds."""
    from trainer.config import SMOKE_LM, SMOKE_VISION, vila_config, vila_optim

    for flag, value in (("--lm", lm), ("--vision", vision)):
        if value is None and not flags["smoke"]:
            raise UsageFailure(f"{flag} is required (or --smoke: a tiny model of random weights)")
    lm, vision = lm or SMOKE_LM, vision or SMOKE_VISION  # --smoke's defaults

    def model_config():
        return vila_config(
            lm,
            vision,
            vision_pretrained,
            stage=stage,
            projector=projector,
            init=init,
            attn_implementation=attn_implementation,
            activation_checkpointing=activation_checkpointing,
        )

    _run(model_config, functools.partial(_train_config, flags, vila_optim(stage)), flags)


@train.command()
@click.argument("checkpoint", metavar="CHECKPOINT")
@click.option("--output", required=True, help="The directory the export is written to.")
def export(checkpoint, output):
    """Export a trained model for evaluation or fine-tuning elsewhere.

    CHECKPOINT is a checkpoint directory or a run's --output (its latest).
    VILA: OUT/llm (a transformers model: AutoModelForCausalLM), OUT/mm_projector
    and OUT/vision_tower under OUT/config.json, VILA's layout. PrefixLM:
    OUT/config.json and OUT/model.safetensors. The LM and vision paths the run
    was started with must still exist (a stage-0 checkpoint holds the projector only).
    """
    from trainer.config import ConfigError
    from trainer.export import export as write

    try:
        what = write(checkpoint, output)
    except (ConfigError, OSError, ImportError) as exc:
        raise UsageFailure(str(exc).strip().splitlines()[0]) from None
    echo(f"Exported {what} to {output}")
