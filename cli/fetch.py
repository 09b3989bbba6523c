"""``corpora fetch``: a build's download alone, into an image store.

For people who fetch on one cluster and build on another: the same reading,
metadata filters and top fraction as ``corpora build`` of the same flags
(so the same URLs), the same fetcher (progress, politeness, the address
guard) and accounting, writing every outcome to ``--image-store``. A later
``corpora build … --image-store URI`` then packs from the store.
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

import click

from cli.common import (
    CorpusName,
    UsageFailure,
    checked_settings,
    echo,
    pipeline_failed,
    usage_errors,
)
from cli.corpus_options import corpus_options, stage_options
from cli.fetch_options import fetch_options
from cli.quiet import only_corpora_lines
from corpora.config import catalog
from corpora.config.flags import PROGRESS_EVERY
from corpora.store import ImageStore, StoreError
from pipelines.runners import (
    RUNNERS,
    RunnerError,
    RunnerSettings,
    runner_settings_from_flags,
)
from pipelines.workers import Zygote, warm_workers


@click.command()
@click.argument("corpus", type=CorpusName(list(catalog.CORPORA)))
@click.option(
    "--input",
    "inputs",
    multiple=True,
    required=True,
    help="Input file, glob, directory or URI (gs://, s3://). Repeatable.",
)
@click.option(
    "--workers",
    type=click.IntRange(1),
    default=None,
    help="DirectRunner worker processes (default: all cores); SDK processes per worker elsewhere.",
)
@click.option("--runner", type=click.Choice(RUNNERS), default=RUNNERS[0], show_default=True)
@click.option(
    "--progress-every",
    type=click.FloatRange(0),
    default=PROGRESS_EVERY,
    show_default=True,
    help="Seconds between each fetch worker's progress lines; 0: none.",
)
@click.option(
    "--allow-private-urls",
    is_flag=True,
    help="Fetch from loopback, private and link-local addresses (refused by default).",
)
@corpus_options
@stage_options
@fetch_options
@click.argument("beam_args", nargs=-1, type=click.UNPROCESSED)
def fetch(corpus, beam_args, workers, runner, **flags):
    """Fetch CORPUS's images into --image-store, without building.

    The records are read and filtered as `corpora build` with the same flags
    reads and filters them; a build pointed at the same --image-store then
    sends no request for them. Beam options go after `--`.
    """
    run(corpus, beam_args, {"workers": workers, "runner": runner}, flags)


def run(
    corpus: str, beam_args: Sequence[str], runner_flags: dict[str, Any], flags: dict[str, Any]
) -> None:
    verbose = logging.getLogger().isEnabledFor(logging.INFO)
    if flags.get("image_store") is None:
        raise UsageFailure("corpora fetch needs --image-store URI: where the images are kept")
    if flags.get("no_image_store"):
        raise UsageFailure("corpora fetch keeps images in --image-store; drop --no-image-store")
    with usage_errors(RunnerError):
        runner = runner_settings_from_flags(beam_args, **runner_flags)
    # the workers' imports start now, beside this process's (pipelines.workers)
    with warm_workers(runner, verbose) as zygote:
        _fetch(corpus, runner, flags, verbose, zygote)


def _fetch(
    corpus: str, runner: RunnerSettings, flags: dict[str, Any], verbose: bool, zygote: Zygote | None
) -> None:
    from pipelines.launch import run_fetch

    settings = checked_settings(corpus, flags, runner, verbose)
    with usage_errors(StoreError):
        ImageStore.open(settings.store.uri)  # created now: a user named it
    echo(f"Fetching {corpus} images → {settings.store.uri} with {runner.runner}")
    try:
        with usage_errors(RunnerError), only_corpora_lines(not verbose):
            counters, seconds = run_fetch(
                settings, runner, zygote.command if zygote is not None else None
            )
    except UsageFailure:
        raise
    except Exception as exc:  # one line: exit 2 for an unreadable input, 1 otherwise
        pipeline_failed(exc, "fetch", verbose)
    print_fetch(counters, seconds, settings.store.uri)


def print_fetch(counters: dict[str, int], seconds: float, store: str) -> None:
    images = {k[len("images.") :]: v for k, v in counters.items() if k.startswith("images.")}
    arrived = {k[len("arrived.") :]: v for k, v in counters.items() if k.startswith("arrived.")}
    failed = {reason: n for reason, n in images.items() if reason != "ok"}
    echo(
        f"Images: {sum(images.values())} in {seconds:.1f} s, {images.get('ok', 0)} ok"
        + "".join(f", {reason} {n}" for reason, n in sorted(failed.items(), key=lambda kv: -kv[1]))
    )
    echo(
        "  arrived: "
        + ", ".join(f"{way} {arrived.get(way, 0)}" for way in ("fetched", "store", "img2dataset"))
    )
    echo(f"Kept in {store}; build from it with --image-store {store}")
