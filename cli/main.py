"""The ``corpora`` command line: flag definitions, and calls into the core and
the pipelines. It holds no logic: :func:`corpora.config.flags.settings_from_flags`
turns the build flags into settings, :mod:`pipelines.inputs` checks the
inputs, :mod:`cli.build` runs the build and prints what it did.

Exit codes: 0 success; 2 usage errors and unreadable inputs (one line naming
the file); 1 when the pipeline fails.
"""

from __future__ import annotations

import signal
import sys
from typing import Any

import click

from cli import build as build_command
from cli.build_help import BuildCommand
from cli.common import (
    CorpusName,
    OneLineGroup,
    Terminated,
    UsageFailure,
    echo,
    on_sigterm,
    terminated,
    usage_errors,
)
from cli.corpus_options import corpus_options, help_for, stage_options
from cli.fetch import fetch
from cli.fetch_options import fetch_options
from cli.quiet import configure_logging
from cli.train import train
from corpora import MAX_IMAGE_SIZE, MAX_SEQ_LEN
from corpora.clip import DEVICES, ClipSettings
from corpora.config import catalog
from corpora.config.flags import PROGRESS_EVERY
from corpora.config.settings import DEFAULTS
from corpora.fetch import RESIZE_MODES
from corpora.sources.inputs import InputError
from corpora.tokens.training import MODEL_TYPES
from pipelines.runners import ENVIRONMENTS, RUNNERS


@click.group(cls=OneLineGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "-v", "--verbose", is_flag=True, help="Show the logs and warnings of Beam and other libraries."
)
def cli(verbose: bool) -> None:
    """Build multimodal pretraining corpora as token-packed WebDataset shards."""
    configure_logging(verbose)


@cli.command("list")
def list_corpora() -> None:
    """List the corpora that `corpora build` can build."""
    width = max(len(name) for name in catalog.CORPORA)
    for name, spec in catalog.CORPORA.items():
        echo(f"{name:<{width}}  {spec.summary}")


@cli.command(cls=BuildCommand)
@click.argument("corpus", type=CorpusName(list(catalog.CORPORA)))
@click.option(
    "--input",
    "inputs",
    multiple=True,
    help="Input file, glob, directory or URI (gs://, s3://). Repeatable. "
    "Default: the bundled sample corpus.",
)
@click.option(
    "--output",
    default=None,
    help="Output directory or URI. Default: ./corpora-out/CORPUS (--smoke: "
    "./corpora-out/smoke/CORPUS)",
)
@click.option(
    "--tokenizer",
    default=DEFAULTS.tokenizer,
    show_default="bundled sample model",
    help="SentencePiece model file (a Llama-2 tokenizer.model works).",
)
@click.option(
    "--seq-len", type=click.IntRange(8, MAX_SEQ_LEN), default=DEFAULTS.seq_len, show_default=True
)
@click.option(
    "--tokens-per-image",
    type=click.IntRange(1),
    default=DEFAULTS.tokens_per_image,
    show_default=True,
)
@click.option(
    "--image-token-id", type=int, default=None, help="Default: the first id past the vocabulary."
)
@click.option("--pad-id", type=int, default=None, help="Default: the tokenizer's pad id, else 0.")
@click.option(
    "--image-token-reserved",
    is_flag=True,
    help="--image-token-id is a vocabulary piece set aside for images (else it must lie past "
    "the vocabulary).",
)
@click.option(
    "--image-size",
    type=click.IntRange(1, MAX_IMAGE_SIZE),
    default=DEFAULTS.fetch.image_size,
    show_default=True,
)
@click.option(
    "--resize-mode",
    type=click.Choice(RESIZE_MODES),
    default=DEFAULTS.fetch.resize_mode,
    show_default=True,
)
@click.option(
    "--samples-per-shard",
    type=click.IntRange(1),
    default=DEFAULTS.samples_per_shard,
    show_default=True,
)
@click.option(
    "--max-line-bytes",
    type=click.IntRange(1),
    default=DEFAULTS.max_line_bytes,
    show_default=True,
    help="Drop an input line longer than this (line_too_long) without loading it.",
)
@click.option(
    "--pack-groups",
    type=click.IntRange(1),
    default=None,
    help="Documents are packed in this many independent groups (by a stable hash of each). "
    "Default: from the number of documents, never the workers: one per 1,000, at least 64 "
    "from 64,000 on, at most 100,000 documents a group; a text corpus (c4) packs each "
    "batch of up to 2,048 records of a file where it tokenizes it.",
)
@click.option(
    "--pack/--no-pack",
    "pack",
    default=DEFAULTS.pack,
    show_default=True,
    help="--no-pack writes one document (or piece of one) per sample, with the same files.",
)
@click.option(
    "--workers",
    type=click.IntRange(1),
    default=None,
    help="DirectRunner worker processes (default: all cores; one, in this process, for inputs "
    "of 128 KiB or less); SDK processes per worker elsewhere.",
)
@click.option("--runner", type=click.Choice(RUNNERS), default=RUNNERS[0], show_default=True)
@click.option("--job-endpoint", default=None, help="PortableRunner: the job service, HOST:PORT.")
@click.option(
    "--environment-type",
    type=click.Choice(ENVIRONMENTS, case_sensitive=False),
    default=None,
    help="Portable/Spark/Flink: where the Python workers run. Default: Beam's (DOCKER).",
)
@click.option(
    "--environment-config",
    default=None,
    help="The container image (DOCKER) or worker pool HOST:PORT (EXTERNAL).",
)
@click.option("--project", default=None, help="DataflowRunner: the Google Cloud project.")
@click.option("--region", default=None, help="DataflowRunner: the region, e.g. us-central1.")
@click.option(
    "--temp-location",
    default=None,
    help="DataflowRunner: a gs:// path for temporary and staged files.",
)
@click.option("--spark-master-url", default=None, help="SparkRunner: e.g. spark://host:7077.")
@click.option("--flink-master", default=None, help="FlinkRunner: e.g. host:8081.")
@click.option(
    "--job-server-jar",
    default=None,
    help="Spark/Flink: a local Beam job-server jar, for clusters without Maven access.",
)
@click.option(
    "--custom-beam-option",
    "custom_options",
    multiple=True,
    metavar="NAME",
    help="An option of your own PipelineOptions, passed after -- to Beam unchecked "
    "(any other option there must be one Beam knows for the runner). Repeatable.",
)
@click.option(
    "--overwrite",
    is_flag=True,
    help="Replace an output built with other settings (otherwise refused; same settings resume).",
)
@click.option(
    "--progress-every",
    type=click.FloatRange(0),
    default=PROGRESS_EVERY,
    show_default=True,
    help="Seconds between progress lines on local builds (records read, images fetched and "
    "their rate, shards complete, ETA); 0: none.",
)
@click.option(
    "--allow-private-urls",
    is_flag=True,
    help="Fetch from loopback, private and link-local addresses (refused by default).",
)
@click.option(
    "--smoke",
    is_flag=True,
    help="Laptop-sized defaults: seq_len 256, 16 tokens per image, 64 px, 8 samples per shard "
    "(what train --smoke models take); a flag given beside it wins.",
)
@click.option(
    "--min-clip-sim",
    type=float,
    default=None,
    help="With --clip-model: drop records (documents: their images) whose computed CLIP score "
    "is lower. Without it, " + help_for("min_clip_sim"),
)
@corpus_options
@stage_options
@click.option(
    "--clip-model",
    default=None,
    help="Score with this open_clip architecture (e.g. ViT-L-14) or open_clip config .json "
    "(documents: and re-place each image before the sentence it matches).",
)
@click.option(
    "--clip-pretrained",
    default=None,
    help="open_clip pretrained tag (e.g. openai; needs network once) or a local checkpoint file.",
)
@click.option(
    "--clip-batch-size", type=click.IntRange(1), default=ClipSettings.batch_size, show_default=True
)
@click.option(
    "--clip-device",
    type=click.Choice(DEVICES),
    default=ClipSettings.device,
    show_default=True,
    help="auto: CUDA (float16) where torch sees a GPU, else the CPU.",
)
@click.option(
    "--clip-top-fraction",
    type=float,
    default=None,
    help="Keep this fraction of records with the highest computed CLIP score over the whole corpus "
    "(pair corpora only).",
)
@click.option(
    "--save-embeddings",
    is_flag=True,
    help="Write image and text CLIP embeddings with ids to clip-embeddings-*.parquet beside the "
    "shards.",
)
@fetch_options
@click.argument("beam_args", nargs=-1, type=click.UNPROCESSED)
def build(corpus, beam_args, overwrite, **flags):
    """Build CORPUS into WebDataset shards plus manifest.json.

    Beam pipeline options go after `--`, e.g. `-- --direct_running_mode=multi_threading`;
    each must be an option Beam knows for the runner (see --custom-beam-option).
    `corpora build CORPUS --help` shows only the flags that apply to CORPUS.
    """
    build_command.run(corpus, beam_args, overwrite, flags)


_verify_option = click.option(
    "--verify/--no-verify",
    default=True,
    show_default=True,
    help="Check each shard's size and sha256 against the manifest before reading it.",
)


@cli.command()
@click.argument("path")
@click.option(
    "--index", type=click.IntRange(0), default=0, show_default=True, help="Which sample to show."
)
@_verify_option
def inspect(path, index, verify):
    """Print one packed sample of a build directory or a shard readably."""
    from corpora.stats.describe import describe_sample, find_sample

    with usage_errors(OSError, ValueError, IndexError):
        sample, manifest = find_sample(path, index, verify)
        description = describe_sample(sample, manifest)
    echo(description)


@cli.group()
def tokenizer() -> None:
    """Train a SentencePiece tokenizer for builds."""


@tokenizer.command("train")
@click.option(
    "--input",
    "inputs",
    multiple=True,
    required=True,
    help="Corpus file, glob or URI (JSON lines with text/text_list, C4 .json.gz, MMC4 .jsonl.zip, "
    "or plain text). Repeatable.",
)
@click.option("--vocab-size", type=click.IntRange(8), required=True, help="SimVLM trained 32000.")
@click.option("--output", required=True, help="Path of the .model file to write.")
@click.option(
    "--model-type", type=click.Choice(MODEL_TYPES), default=MODEL_TYPES[0], show_default=True
)
@click.option(
    "--max-sentences",
    type=click.IntRange(1),
    default=10_000_000,
    show_default=True,
    help="SentencePiece samples at most this many texts.",
)
def tokenizer_train(inputs, vocab_size, output, model_type, max_sentences):
    """Train a SentencePiece model on a corpus's text."""
    import sentencepiece as spm

    from corpora.tokens.tokenizer import file_sha256
    from corpora.tokens.training import TrainingError, match_corpus_files, train_on_files

    with usage_errors(InputError):
        files = match_corpus_files(inputs)
    echo(
        f"Training a {model_type} SentencePiece model, vocab {vocab_size}, on {len(files)} file(s)"
    )
    with usage_errors(InputError, TrainingError):
        texts = train_on_files(
            files, output, vocab_size, model_type, max_sentences, progress=_texts_read
        )
    size = spm.SentencePieceProcessor(model_file=output).get_piece_size()
    echo(f"Wrote {output}: {size} pieces from {texts} texts, sha256 {file_sha256(output)}")


def _texts_read(count: int) -> None:
    echo(f"  read {count} texts", err=True)


def _progress(number: int, total: int, shard: str) -> None:
    if total > 1 and sys.stderr.isatty():
        click.echo(f"\rreading shard {number}/{total}", err=True, nl=number == total)


@cli.command()
@click.argument("path", metavar="DIR_OR_MANIFEST")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the statistics as JSON (the format of stats.json).",
)
@_verify_option
def stats(path, as_json, verify):
    """Statistics of a build, recomputed from its shards.

    DIR_OR_MANIFEST is a build directory, its manifest.json, or one shard of it.
    """
    from corpora.reader import BuildInputError
    from corpora.stats.figures import stats_from_shards, stats_json
    from corpora.stats.table import format_table

    with usage_errors(BuildInputError):
        result = stats_from_shards(path, _progress, verify)
    echo(stats_json(result) if as_json else format_table(result), nl=not as_json)


@cli.command()
@click.argument("path", metavar="DIR")
@click.option("--output", default=None, help="Where to write the page. Default: DIR/report.html")
@click.option(
    "--samples",
    type=click.IntRange(0),
    default=3,
    show_default=True,
    help="Packed samples shown in the gallery.",
)
@_verify_option
def report(path, output, samples, verify):
    """Write report.html: a build's statistics, charts and a gallery of packed samples."""
    from corpora.reader import BuildInputError
    from corpora.stats.report import write_report

    with usage_errors(BuildInputError):
        try:
            written = write_report(path, output, samples, _progress, verify)
        except OSError as exc:
            raise UsageFailure(f"cannot write report: {exc}") from None
    echo(f"Wrote {written}")


# Commands defined in modules of their own join the group here.
cli.add_command(train)
cli.add_command(fetch)


def main(*args: Any, **kwargs: Any) -> Any:
    """The entry point (pyproject.toml: ``corpora = "cli.main:main"``): the
    group, with SIGTERM handled as Ctrl-C is (:func:`cli.common.on_sigterm`)
    and exit 143 (128 + 15) after its cleanup."""
    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        return cli.main(*args, **kwargs)
    except (Terminated, SystemExit):
        if not terminated():
            raise
        echo("corpora: terminated (SIGTERM); cleaned up", err=True)
        raise SystemExit(128 + signal.SIGTERM) from None


if __name__ == "__main__":
    main(prog_name="corpora")
