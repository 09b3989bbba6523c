"""``corpora train …``: check a blend's batches (``data``); the models add their commands here.

The commands map flags onto ``trainer`` settings and hold no logic.
"""

from __future__ import annotations

import logging

import click

from cli.common import UsageFailure


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
    """Train on builds: check a blend's batches first (`data`)."""


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
    type=click.Choice(["examples", "images", "tokens"]),
    default="examples",
    show_default=True,
    help="What the weights count: samples, images, or non-padding tokens.",
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
    type=int,
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
    type=click.IntRange(1),
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
        click.echo(describe_spec(loader.spec, loader.sources, weight_unit, size))
        names = [s.location for s in loader.sources]
        for number, (batch, picks) in enumerate(loader.preview(batches)):
            click.echo(describe_batch(number, batch, picks, loader.spec, names))
        if mix_samples:
            counts = loader.measure_mix(mix_samples)
            click.echo(describe_mix(counts, loader.sources, weight_unit, mix_samples))
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
    click.echo(
        f"Wrote {indexes} .tar.idx file(s) and {build.rstrip('/')}/.nv-meta/ "
        "(.info.json, split.yaml, dataset.yaml: CrudeWebdataset)"
    )
