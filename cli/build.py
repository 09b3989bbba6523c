"""``corpora build``: flags to settings (the core), inputs checked (the pipelines),
the build run, and what it prints."""

from __future__ import annotations

import logging
import sys
from typing import Any, Sequence

import click
from click.core import ParameterSource

from cli.common import UsageFailure, checked_settings, echo, pipeline_failed, usage_errors
from cli.quiet import only_corpora_lines
from corpora.config.bundled_sample import sample_contents
from corpora.config.flags import SMOKE_FLAGS, FlagError, describe_clip
from corpora.stats.advice import failures_advice, nothing_kept
from corpora.stats.table import format_count
from pipelines.runners import (
    RUNNER_FLAGS,
    RunnerError,
    RunnerSettings,
    fit_to_input,
    runner_settings_from_flags,
)
from pipelines.workers import Zygote, warm_workers


def run(corpus: str, beam_args: Sequence[str], overwrite: bool, flags: dict[str, Any]) -> None:
    """Build ``corpus`` with the command line's ``flags``; exit 2 on a usage
    error, 1 when the pipeline fails."""
    verbose = logging.getLogger().isEnabledFor(logging.INFO)
    context = click.get_current_context()
    for name in SMOKE_FLAGS:  # a default left as it is: --smoke may set its own
        if context.get_parameter_source(name) is ParameterSource.DEFAULT:
            flags[name] = None
    runner_flags = {name: flags.pop(name) for name in RUNNER_FLAGS}
    with usage_errors(RunnerError):
        runner = runner_settings_from_flags(beam_args, **runner_flags)
    fit_workers = runner_flags["workers"] is None
    if not flags["inputs"] and fit_workers:  # the bundled sample: built in this process
        _build(corpus, runner, fit_workers, overwrite, flags, verbose, None)
        return
    # the workers' imports start now, beside this process's (pipelines.workers)
    with warm_workers(runner, verbose) as zygote:
        _build(corpus, runner, fit_workers, overwrite, flags, verbose, zygote)


def _build(
    corpus: str,
    runner: RunnerSettings,
    fit_workers: bool,
    overwrite: bool,
    flags: dict[str, Any],
    verbose: bool,
    zygote: Zygote | None,
) -> None:
    from corpora.lock.output import LockError
    from corpora.shards.resume import SettingsChanged
    from corpora.sources.inputs import InputError
    from pipelines.inputs import input_bytes
    from pipelines.launch import execute

    settings = checked_settings(corpus, flags, runner, verbose)
    with usage_errors(FlagError, InputError, RunnerError):
        if zygote is not None and settings.clip is not None:
            zygote.preload("torch", "open_clip")  # beside this process's load of the model
        clip_line = describe_clip(settings)
        if not flags["inputs"]:
            sample = settings.inputs[0]
            echo(
                f"No --input given: building the bundled sample corpus "
                f"({sample_contents(sample)}): {sample}"
            )
        if settings.store.off:
            click.echo(f"corpora: {settings.store.off}; every image is fetched", err=True)
        if fit_workers:  # a small build: one worker, in this process
            runner = fit_to_input(runner, input_bytes(settings))
    if zygote is not None and runner.workers == 1:
        zygote.close()  # not needed after all
        zygote = None
    if clip_line:
        echo(clip_line)
    # remote runners size their own workers unless --workers is given
    shown = runner.runner == "DirectRunner" or not fit_workers
    where = f" ({runner.workers} worker{'s' if runner.workers != 1 else ''})" if shown else ""
    echo(f"Building {corpus} → {settings.output} with {runner.runner}{where}")
    echo("  " + ", ".join(f"{k}={v}" for k, v in settings.derived().items()))
    if settings.corpus_options:
        echo("  " + ", ".join(f"{k}={v}" for k, v in settings.corpus_options.items()))
    staged = {k: v for k, v in settings.stage_options.items() if v is not None}
    if staged:  # the stages' options that are set (corpora.stages)
        echo("  " + ", ".join(f"{k}={v}" for k, v in staged.items()))
    try:
        with usage_errors(SettingsChanged, RunnerError, LockError), only_corpora_lines(not verbose):
            outcome = execute(
                settings,
                runner,
                overwrite=overwrite,
                verbose=verbose,
                progress_every=settings.fetch.progress_interval,
                worker_command=zygote.command if zygote is not None else None,
            )
    except UsageFailure:
        raise
    except Exception as exc:  # one line: exit 2 for an unreadable input, 1 otherwise
        pipeline_failed(exc, "build", verbose)
    if outcome.manifest is None:
        echo(
            f"Dry run: the {runner.runner} job was built and validated; nothing was run or written."
        )
        return
    print_summary(outcome.manifest)
    print_run(outcome)
    empty = nothing_kept(outcome.manifest)
    if empty is not None:  # input records, none kept: a failure with its likeliest cause
        echo(f"corpora: {empty}", err=True)
        sys.exit(1)


def print_run(outcome) -> None:
    counters, rates = outcome.counters, outcome.throughput()
    resumed = counters.get("shards.resumed", 0)
    if resumed:
        echo(
            f"Resumed: {resumed} shard(s) were already complete and left as they were; "
            f"{counters.get('shards', 0)} written now"
        )
    echo(
        f"Throughput over {outcome.seconds:.1f} s: {rates['input_per_s']:.1f} input records/s, "
        f"{rates['images_per_s']:.1f} images/s, {rates['megabytes_per_s']:.2f} MB/s of shards"
    )
    images = {k[len("images.") :]: v for k, v in counters.items() if k.startswith("images.")}
    if images:
        echo("  image fetches: " + ", ".join(f"{k} {v}" for k, v in sorted(images.items())))


def print_summary(manifest: dict) -> None:
    funnel, totals = manifest["funnel"], manifest["totals"]
    counts = (
        format_count(totals[key], noun)
        for key, noun in (("shards", "shard"), ("samples", "sequence"), ("documents", "document"))
    )
    attempted = (manifest.get("images") or {}).get("input", 0)  # a text corpus attempts none
    images = f", {format_count(totals['images'], 'image')}" if attempted else ""
    echo(f"Wrote {', '.join(counts)}{images}")
    if manifest["shard_pattern"]:
        echo(f"  shards: {manifest['shard_pattern']}")
    echo(f"Funnel ({funnel['unit']}s): input {funnel['input']}, kept {funnel['kept']}")
    for reason, count in sorted(funnel["dropped"].items(), key=lambda kv: -kv[1]):
        echo(f"  dropped {reason}: {count}")
    removed = manifest.get("images_removed") or {}
    for reason, count in sorted(removed.items(), key=lambda kv: -kv[1]):
        echo(f"  images removed from kept {funnel['unit']}s, {reason}: {count}")
    echo("Statistics: stats.json (`corpora stats DIR`, `corpora report DIR`)")
    images = manifest.get("images")
    if images and images["input"]:  # a text corpus attempts none
        echo(
            f"Images: {images['input']} attempted, {images['ok']} ok"
            + "".join(
                f", {reason} {n}"
                for reason, n in sorted(images["failed"].items(), key=lambda kv: -kv[1])
            )
        )
        if images["failed"]:
            echo("  " + failures_advice(images))
