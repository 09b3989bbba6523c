"""``corpora train …``: check a blend's batches (``data``), pretrain PrefixLM (``prefixlm``) or
VILA (``vila``), export a trained model (``export``).

The commands map flags onto ``trainer`` settings and hold no logic: each flag is a field of
a configuration dataclass (``cli/train_options.py``), and the model comes from
``trainer.models.registry``.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import sys

import click
from click.core import ParameterSource

from cli.common import UsageFailure, echo
from cli.train_options import options, values
from trainer.config import (
    ConfigError,
    DataConfig,
    OptimConfig,
    PrefixLMConfig,
    TrainConfig,
    VilaConfig,
    data_config,
    smoke,
)
from trainer.models import registry


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


# `corpora train data` previews a few small batches read in this process, not a run's
PREVIEW_DEFAULTS = {"batch_size": 4, "num_workers": 0}


@train.command()
@options(DataConfig, defaults=PREVIEW_DEFAULTS)
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
def data(batches, mix_samples, **flags):
    """Print a blend's first batches readably and measure its mix.

    Before spending GPU hours: which documents and images each row holds,
    where the labels (vila) or the encoder/decoder cut (prefixlm) fall, and
    the share of each build against its weight. For prefixlm also the padding
    of the encoder and decoder streams, one sample a row and packed to
    --encoder-len and --decoder-len (or to the lengths it suggests).
    """
    from trainer.describe import describe_batch, describe_mix, describe_spec, describe_streams
    from trainer.loader import Loader
    from trainer.stream import DataError

    logging.getLogger("trainer").setLevel(logging.WARNING)  # bad shards: one line each
    settings = values(flags, DataConfig)
    try:
        config = data_config([parse_source(s) for s in settings.pop("sources")], **settings)
        loader = Loader(config)
        size = loader.config.image_size or loader.spec.image_size or (224, 224)
        unit = config.weight_unit
        echo(describe_spec(loader.spec, loader.sources, unit, size))
        names = [s.location for s in loader.sources]
        for number, (batch, picks) in enumerate(loader.preview(batches)):
            echo(describe_batch(number, batch, picks, loader.spec, names))
        if mix_samples:
            counts = loader.measure_mix(mix_samples)
            echo(describe_mix(counts, loader.sources, unit, mix_samples))
        if config.objective == "prefixlm" and batches:
            echo(describe_streams(loader))
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


# what a training run's model sets in its DataConfig, and its TrainConfig's batch and seed
MODEL_SETS = ("objective", "image_size", "batch_size", "seed")
# TrainConfig fields that --smoke sets, each also a flag of the same name
SMOKE_FIELDS = ("steps", "batch_size", "accumulate", "log_every", "checkpoint_every")


# DataConfig fields that only PrefixLM reads (its two streams packed to their own lengths)
PREFIXLM_ONLY = ("encoder_len", "decoder_len")


def training_options(command, exclude: tuple[str, ...] = ()):
    """The flags every model shares: data, steps and batch, optimizer, devices, checkpoints
    (but the data flags ``exclude`` names)."""
    command = click.option(
        "--smoke",
        is_flag=True,
        help="Laptop-sized defaults for the flags not given: 20 steps of 2 sequences, a line "
        "every 5, no loader workers, a tiny model (PrefixLM tiny; VILA: a tiny random Llama "
        "and ViT).",
    )(command)
    command = options(OptimConfig)(command)
    command = options(TrainConfig)(command)
    return options(DataConfig, exclude=MODEL_SETS + exclude)(command)


def _given(name: str) -> bool:
    """Did the command line (or the environment) give the flag ``name``,
    rather than leave it at its default?"""
    source = click.get_current_context().get_parameter_source(name)
    return source in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)


def _train_config(flags: dict, recipe: OptimConfig) -> TrainConfig:
    """The run's settings: the recipe with the optimizer flags given, the loop's flags,
    and with --smoke the laptop-sized run's values for every flag not given."""
    changes = {name: v for name, v in values(flags, OptimConfig).items() if v is not None}
    settings = values(flags, TrainConfig)
    settings["steps"] = settings["steps"] or 1  # none given: --smoke's, set below
    config = TrainConfig(optim=dataclasses.replace(recipe, **changes), **settings)
    if not flags["smoke"]:
        return config
    given = {field: getattr(config, field) for field in SMOKE_FIELDS if _given(field)}
    return dataclasses.replace(smoke(config), **given)


def _run(name: str, flags: dict) -> None:
    """Train the registry's model ``name`` as the flags say; a setting that cannot work
    exits 2 in one line, a run that fails later exits 1."""
    entry = registry.model(name)
    settings = values(flags, entry.config)
    for field, value in entry.smoke.items():  # --smoke's model, for the flags not given
        if flags["smoke"] and not _given(field):
            settings[field] = value
        elif settings[field] is None:
            flag = "--" + field.replace("_", "-")
            raise UsageFailure(f"{flag} is required (or --smoke: a tiny model of random weights)")
    if flags["steps"] is None and not flags["smoke"]:
        raise UsageFailure("--steps is required (or --smoke)")
    data = values(flags, DataConfig, exclude=MODEL_SETS)
    if flags["smoke"] and not _given("num_workers"):
        data["num_workers"] = 0
    try:
        model_config = entry.configure(**{k: v for k, v in settings.items() if v is not None})
        config = _train_config(flags, entry.recipe(model_config))
        from trainer.train import run

        sources = [parse_source(source) for source in data.pop("sources")]
        run(model_config, config, data_config(sources, **data))
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
@options(PrefixLMConfig)
@training_options
def prefixlm(**flags):
    """Pretrain SimVLM's PrefixLM from scratch on builds (e.g. image-text pairs + C4, 8:1)."""
    _run("prefixlm", flags)


@train.command()
@options(VilaConfig)
@functools.partial(training_options, exclude=PREFIXLM_ONLY)
def vila(**flags):
    """Pretrain VILA (stage 0: projector; stage 1: projector and LM) on builds."""
    _run("vila", flags)


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
