"""The ``corpora`` command line. It maps flags onto settings and holds no logic.

Exit codes: 0 success; 2 usage errors and unreadable inputs (one line naming
the file); 1 when the pipeline fails.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import tempfile

import click

from corpora import catalog
from corpora import settings as build_settings
from pipelines.runners import ENVIRONMENTS, RUNNERS, RunnerError, RunnerSettings, pipeline_options


class UsageFailure(click.ClickException):
    """Printed as one line, exit code 2."""

    exit_code = 2

    def show(self, file=None) -> None:
        click.echo(f"corpora: {self.format_message()}", err=True)


def _check_tokenizer(path: str) -> None:
    if not os.path.isfile(path):
        raise UsageFailure(f"tokenizer not found: {path}")
    try:
        import sentencepiece as spm

        spm.SentencePieceProcessor(model_file=path)
    except (OSError, RuntimeError) as exc:
        raise UsageFailure(f"tokenizer is not a readable SentencePiece model: {path} ({str(exc).splitlines()[0]})")


def resolve_inputs(inputs: tuple[str, ...], spec: catalog.CorpusSpec) -> tuple[str, ...]:
    """Expand directories to the corpus's file patterns; check each input matches
    files that can be opened."""
    from pipelines import storage

    resolved = []
    for given in inputs:
        patterns = [given]
        if os.path.isdir(given):
            patterns = [os.path.join(given, p) for p in spec.input_patterns]
        matched = []
        for pattern in patterns:
            try:
                matched += storage.match(pattern)
            except Exception as exc:  # Beam raises BeamIOError and friends
                raise UsageFailure(f"cannot read input {given}: {str(exc).splitlines()[0]}") from None
        if not matched:
            raise UsageFailure(f"input not found: {given}")
        for path in sorted(matched):
            try:
                with storage.open_read(path) as stream:
                    stream.read(1)
            except Exception as exc:
                raise UsageFailure(f"cannot read input {path}: {str(exc).splitlines()[0]}") from None
        resolved += patterns
    return tuple(resolved)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", is_flag=True, help="Show Beam's logs.")
def cli(verbose: bool) -> None:
    """Build multimodal pretraining corpora as token-packed WebDataset shards."""
    logging.basicConfig(level=logging.INFO if verbose else logging.ERROR,
                        format="%(levelname)s %(name)s: %(message)s")


@cli.command("list")
def list_corpora() -> None:
    """List the corpora that `corpora build` can build."""
    width = max(len(name) for name in catalog.CORPORA)
    for name, spec in sorted(catalog.CORPORA.items()):
        click.echo(f"{name:<{width}}  {spec.summary}")


@cli.command(context_settings={"ignore_unknown_options": True})
@click.argument("corpus", type=click.Choice(sorted(catalog.CORPORA)))
@click.option("--input", "inputs", multiple=True,
              help="Input file, glob, directory or URI (gs://, s3://). Repeatable. "
                   "Default: the bundled sample corpus.")
@click.option("--output", default=None, help="Output directory or URI. Default: ./corpora-out/CORPUS")
@click.option("--tokenizer", default=build_settings.SAMPLE_TOKENIZER, show_default="bundled sample model",
              help="SentencePiece model file (a Llama-2 tokenizer.model works).")
@click.option("--seq-len", type=click.IntRange(8), default=2048, show_default=True)
@click.option("--tokens-per-image", type=click.IntRange(1), default=576, show_default=True)
@click.option("--image-token-id", type=int, default=None, help="Default: the first id past the vocabulary.")
@click.option("--pad-id", type=int, default=None, help="Default: the tokenizer's pad id, else 0.")
@click.option("--image-size", type=click.IntRange(1), default=336, show_default=True)
@click.option("--resize-mode", type=click.Choice(["no", "border", "keep_ratio", "keep_ratio_largest", "center_crop"]),
              default="center_crop", show_default=True)
@click.option("--samples-per-shard", type=click.IntRange(1), default=1000, show_default=True)
@click.option("--pack-groups", type=click.IntRange(1), default=1, show_default=True,
              help="Documents are packed in this many independent groups (by id hash).")
@click.option("--workers", type=click.IntRange(1), default=None,
              help="DirectRunner worker processes (default: all cores); SDK processes per worker elsewhere.")
@click.option("--runner", type=click.Choice(RUNNERS), default="DirectRunner", show_default=True)
@click.option("--job-endpoint", default=None, help="PortableRunner: the job service, HOST:PORT.")
@click.option("--environment-type", type=click.Choice(ENVIRONMENTS, case_sensitive=False), default=None,
              help="Portable/Spark/Flink: where the Python workers run. Default: Beam's (DOCKER).")
@click.option("--environment-config", default=None,
              help="The container image (DOCKER) or worker pool HOST:PORT (EXTERNAL).")
@click.option("--project", default=None, help="DataflowRunner: the Google Cloud project.")
@click.option("--region", default=None, help="DataflowRunner: the region, e.g. us-central1.")
@click.option("--temp-location", default=None, help="DataflowRunner: a gs:// path for temporary and staged files.")
@click.option("--spark-master-url", default=None, help="SparkRunner: e.g. spark://host:7077.")
@click.option("--flink-master", default=None, help="FlinkRunner: e.g. host:8081.")
@click.option("--job-server-jar", default=None,
              help="Spark/Flink: a local Beam job-server jar, for clusters without Maven access.")
@click.option("--overwrite", is_flag=True,
              help="Replace an output built with other settings (otherwise refused; same settings resume).")
@click.option("--progress-every", type=click.FloatRange(0), default=30, show_default=True,
              help="Seconds between progress lines on local builds (0: none).")
@click.option("--allow-private-urls", is_flag=True,
              help="Fetch from loopback, private and link-local addresses (refused by default).")
@click.option("--smoke", is_flag=True, help="Laptop-sized settings: seq_len 256, 16 tokens per image, 64 px.")
@click.argument("beam_args", nargs=-1, type=click.UNPROCESSED)
def build(corpus, inputs, output, tokenizer, seq_len, tokens_per_image, image_token_id, pad_id, image_size,
          resize_mode, samples_per_shard, pack_groups, workers, runner, job_endpoint, environment_type,
          environment_config, project, region, temp_location, spark_master_url, flink_master, job_server_jar,
          overwrite, progress_every, allow_private_urls, smoke, beam_args):
    """Build CORPUS into WebDataset shards plus manifest.json.

    Beam pipeline options go after `--`, e.g. `-- --direct_running_mode=multi_threading`.
    """
    spec = catalog.get(corpus)
    _check_tokenizer(tokenizer)
    verbose = logging.getLogger().isEnabledFor(logging.INFO)
    try:
        runner_settings = RunnerSettings(
            # Remote runners size their own workers unless --workers is given.
            runner=runner, workers=workers or (os.cpu_count() or 1 if runner == "DirectRunner" else 1),
            job_endpoint=job_endpoint,
            environment_type=environment_type, environment_config=environment_config, project=project,
            region=region, temp_location=temp_location, spark_master_url=spark_master_url,
            flink_master=flink_master, job_server_jar=job_server_jar, beam_args=tuple(beam_args))
        from apache_beam.io.filesystems import FileSystems

        FileSystems.set_options(pipeline_options(runner_settings, verbose=verbose))  # s3 endpoint, keys
    except (RunnerError, SystemExit) as exc:  # Beam's argparse exits on a malformed option
        raise UsageFailure(str(exc) if isinstance(exc, RunnerError) else "invalid Beam options after --") from None
    if output is None:
        output = os.path.join("corpora-out", corpus)
    if not inputs:
        if corpus != "mmc4-pairs":
            raise UsageFailure(f"--input is required for {corpus} (the bundled sample is MMC4)")
        from corpora.sample import materialize_sample

        # A fixed place, so that re-running the command resumes the same build.
        inputs = (materialize_sample(os.path.join(tempfile.gettempdir(), "corpora-sample")),)
        click.echo(f"No --input given: building the bundled sample corpus ({inputs[0]})")
    inputs = resolve_inputs(tuple(inputs), spec)
    if "://" not in output:
        output = os.path.abspath(output)
    try:
        settings = build_settings.BUILDERS[corpus](
            inputs, output, tokenizer=tokenizer, seq_len=seq_len, tokens_per_image=tokens_per_image,
            image_token_id=image_token_id, pad_id=pad_id, samples_per_shard=samples_per_shard,
            pack_groups=pack_groups,
        )
        settings = settings.replace(fetch=dataclasses.replace(
            settings.fetch, image_size=image_size, resize_mode=resize_mode, allow_private_urls=allow_private_urls))
        if smoke:
            settings = build_settings.smoke(settings)
    except ValueError as exc:
        raise UsageFailure(str(exc)) from None
    derived = settings.derived()
    where = f" ({runner_settings.workers} workers)" if runner == "DirectRunner" or workers else ""
    click.echo(f"Building {corpus} → {output} with {runner}{where}")
    click.echo("  " + ", ".join(f"{k}={v}" for k, v in derived.items()))

    from corpora.resume import SettingsChanged
    from pipelines.launch import execute

    try:
        outcome = execute(settings, runner_settings, overwrite=overwrite, verbose=verbose,
                          progress_every=progress_every)
    except (SettingsChanged, RunnerError) as exc:
        raise UsageFailure(str(exc)) from None
    except Exception as exc:  # the pipeline failed: one line, exit 1
        message = str(exc).strip().splitlines()
        click.echo(f"corpora: build failed: {message[-1] if message else type(exc).__name__}", err=True)
        if logging.getLogger().isEnabledFor(logging.INFO):
            raise
        sys.exit(1)
    if outcome.manifest is None:
        click.echo(f"Dry run: the {runner} job was built and validated; nothing was run or written.")
        return
    _print_summary(outcome.manifest)
    _print_run(outcome)


def _print_run(outcome) -> None:
    counters, rates = outcome.counters, outcome.throughput()
    resumed = counters.get("shards.resumed", 0)
    if resumed:
        click.echo(f"Resumed: {resumed} shard(s) were already complete and left as they were; "
                   f"{counters.get('shards', 0)} written now")
    click.echo(f"Throughput over {outcome.seconds:.1f} s: {rates['input_per_s']:.1f} input records/s, "
               f"{rates['images_per_s']:.1f} images/s, {rates['megabytes_per_s']:.2f} MB/s of shards")
    images = {k[len("images."):]: v for k, v in counters.items() if k.startswith("images.")}
    if images:
        click.echo("  image fetches: " + ", ".join(f"{k} {v}" for k, v in sorted(images.items())))


def _print_summary(manifest: dict) -> None:
    funnel, totals = manifest["funnel"], manifest["totals"]
    click.echo(f"Wrote {totals['shards']} shard(s), {totals['samples']} sequences, "
               f"{totals['documents']} documents, {totals['images']} images")
    if manifest["shard_pattern"]:
        click.echo(f"  shards: {manifest['shard_pattern']}")
    click.echo(f"Funnel ({funnel['unit']}s): input {funnel['input']}, kept {funnel['kept']}")
    for reason, count in sorted(funnel["dropped"].items(), key=lambda kv: -kv[1]):
        click.echo(f"  dropped {reason}: {count}")


@cli.command()
@click.argument("path")
@click.option("--index", type=click.IntRange(0), default=0, show_default=True, help="Which sample to show.")
def inspect(path, index):
    """Print one packed sample of a build directory or a shard readably."""
    from corpora.inspect import describe_sample, find_sample

    try:
        sample, manifest = find_sample(path, index)
    except (OSError, ValueError, IndexError) as exc:
        raise UsageFailure(str(exc)) from None
    click.echo(describe_sample(sample, manifest))


def main() -> None:
    cli(prog_name="corpora")


if __name__ == "__main__":
    main()
