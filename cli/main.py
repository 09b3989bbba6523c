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

from cli import fetch_options
from corpora import catalog
from corpora import settings as build_settings
from corpora.spec import CLIP_DOCUMENTS, CLIP_PAIRS, CorpusSpec
from pipelines.runners import ENVIRONMENTS, RUNNERS, RunnerError, RunnerSettings, pipeline_options

DOCUMENT_CLIP_CORPORA = catalog.clip_corpora(CLIP_DOCUMENTS)  # image x sentence; images re-placed
CLIP_CORPORA = catalog.clip_corpora(CLIP_PAIRS) + DOCUMENT_CLIP_CORPORA
CORPUS_OPTIONS = {
    name: tuple(option.name for option in spec.options) for name, spec in catalog.CORPORA.items()
}


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
        raise UsageFailure(
            f"tokenizer is not a readable SentencePiece model: {path} ({str(exc).splitlines()[0]})"
        )


def _check_failures_file(path: str) -> str:
    from corpora.accounting import read_failure_urls

    if "://" not in path:
        path = os.path.abspath(path)
    try:
        read_failure_urls(path)
    except Exception as exc:  # missing file, not parquet, no url column
        raise UsageFailure(
            f"cannot read failures file {path}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
        ) from None
    return path


def _clip_settings(model, pretrained, **options):
    """CLIP flags → ClipSettings, loading the model once here so a bad name or
    checkpoint fails now, in one line, rather than inside a worker."""
    if model is None:
        given = [
            flag
            for flag, value in (
                ("--clip-pretrained", pretrained),
                ("--min-clip-sim", options["min_sim"]),
                ("--clip-top-fraction", options["top_fraction"]),
                ("--save-embeddings", options["save_embeddings"]),
            )
            if value
        ]
        if given:
            raise UsageFailure(f"{given[0]} needs --clip-model")
        return None
    if pretrained is None:
        raise UsageFailure(
            "--clip-model needs --clip-pretrained (an open_clip tag such as openai, "
            "or a local checkpoint file)"
        )
    from corpora import clip

    try:
        settings = clip.clip_settings(model, pretrained, **options)
        device = clip.resolve_device(settings.device)
        loaded = clip.load_clip(settings, device="cpu")
    except clip.ClipModelError as exc:
        raise UsageFailure(str(exc)) from None
    click.echo(
        f"CLIP: {settings.model_id}, embedding dim {loaded.embed_dim}, batch {settings.batch_size}, "
        f"device {device}"
    )
    return settings


def resolve_inputs(inputs: tuple[str, ...], spec: CorpusSpec) -> tuple[str, ...]:
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
                raise UsageFailure(
                    f"cannot read input {given}: {str(exc).splitlines()[0]}"
                ) from None
        if not matched:
            raise UsageFailure(f"input not found: {given}")
        for path in sorted(matched):
            try:
                with storage.open_read(path) as stream:
                    stream.read(1)
            except Exception as exc:
                raise UsageFailure(
                    f"cannot read input {path}: {str(exc).splitlines()[0]}"
                ) from None
        resolved += patterns
    return tuple(resolved)


def check_inputs(settings, spec: CorpusSpec) -> None:
    """Run the corpus's input check on every input file (a COYO parquet must
    have the columns the build reads): exit 2 naming the file."""
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems

    from corpora.io import InputError

    for pattern in settings.inputs:
        for match in FileSystems.match([pattern])[0].metadata_list:
            with FileSystems.open(
                match.path, compression_type=CompressionTypes.UNCOMPRESSED
            ) as stream:
                try:
                    spec.check_input(stream, match.path, settings)
                except InputError as exc:
                    raise UsageFailure(str(exc)) from None


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", is_flag=True, help="Show Beam's logs.")
def cli(verbose: bool) -> None:
    """Build multimodal pretraining corpora as token-packed WebDataset shards."""
    logging.basicConfig(
        level=logging.INFO if verbose else logging.ERROR,
        format="%(levelname)s %(name)s: %(message)s",
    )


@cli.command("list")
def list_corpora() -> None:
    """List the corpora that `corpora build` can build."""
    width = max(len(name) for name in catalog.CORPORA)
    for name, spec in sorted(catalog.CORPORA.items()):
        click.echo(f"{name:<{width}}  {spec.summary}")


@cli.command(context_settings={"ignore_unknown_options": True})
@click.argument("corpus", type=click.Choice(sorted(catalog.CORPORA)))
@click.option(
    "--input",
    "inputs",
    multiple=True,
    help="Input file, glob, directory or URI (gs://, s3://). Repeatable. "
    "Default: the bundled sample corpus.",
)
@click.option(
    "--output", default=None, help="Output directory or URI. Default: ./corpora-out/CORPUS"
)
@click.option(
    "--tokenizer",
    default=build_settings.SAMPLE_TOKENIZER,
    show_default="bundled sample model",
    help="SentencePiece model file (a Llama-2 tokenizer.model works).",
)
@click.option("--seq-len", type=click.IntRange(8), default=2048, show_default=True)
@click.option("--tokens-per-image", type=click.IntRange(1), default=576, show_default=True)
@click.option(
    "--image-token-id", type=int, default=None, help="Default: the first id past the vocabulary."
)
@click.option("--pad-id", type=int, default=None, help="Default: the tokenizer's pad id, else 0.")
@click.option("--image-size", type=click.IntRange(1), default=336, show_default=True)
@click.option(
    "--resize-mode",
    type=click.Choice(["no", "border", "keep_ratio", "keep_ratio_largest", "center_crop"]),
    default="center_crop",
    show_default=True,
)
@click.option("--samples-per-shard", type=click.IntRange(1), default=1000, show_default=True)
@click.option(
    "--pack-groups",
    type=click.IntRange(1),
    default=None,
    help="Documents are packed in this many independent groups (by id hash). "
    "Default: one per 100,000 documents.",
)
@click.option(
    "--pack/--no-pack",
    "pack",
    default=True,
    show_default=True,
    help="--no-pack writes one document (or piece of one) per sample, with the same files.",
)
@click.option(
    "--workers",
    type=click.IntRange(1),
    default=None,
    help="DirectRunner worker processes (default: all cores); SDK processes per worker elsewhere.",
)
@click.option("--runner", type=click.Choice(RUNNERS), default="DirectRunner", show_default=True)
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
    "--overwrite",
    is_flag=True,
    help="Replace an output built with other settings (otherwise refused; same settings resume).",
)
@click.option(
    "--progress-every",
    type=click.FloatRange(0),
    default=30,
    show_default=True,
    help="Seconds between progress lines on local builds, the build's and each fetch "
    "worker's (URLs done, success rate, images/s); 0: none.",
)
@click.option(
    "--allow-private-urls",
    is_flag=True,
    help="Fetch from loopback, private and link-local addresses (refused by default).",
)
@click.option(
    "--smoke", is_flag=True, help="Laptop-sized settings: seq_len 256, 16 tokens per image, 64 px."
)
@click.option(
    "--min-clip-sim",
    type=float,
    default=None,
    help="With --clip-model: drop records (mmc4, mmc4-reordered: images) whose computed CLIP score is "
    "lower. Without it, coyo only: "
    "keep rows with clip_similarity_vitb32 + clip_similarity_vitl14 at least this "
    "(default 0.6, VILA's COYO-25M; 0 turns it off).",
)
@click.option(
    "--top-fraction",
    type=float,
    default=None,
    help="coyo: keep this fraction of rows with the highest clip_similarity_vitb32 + vitl14 over the "
    "whole corpus (ties broken by id), before any download. VILA's COYO-25M: 0.2 per file.",
)
@click.option(
    "--max-nsfw",
    type=float,
    default=None,
    help="coyo: drop rows where either NSFW score is above this.",
)
@click.option(
    "--min-size",
    type=click.IntRange(0),
    default=None,
    help="coyo: drop rows whose upstream width or height is below this.",
)
@click.option(
    "--reassign",
    is_flag=True,
    default=None,
    help="mmc4*: recompute matched_text_index/matched_sim from similarity_matrix (linear assignment).",
)
@click.option(
    "--min-sim",
    type=float,
    default=None,
    help="mmc4, mmc4-reordered: remove images whose matched_sim is below this (OpenFlamingo: 0.24).",
)
@click.option(
    "--max-images",
    type=click.IntRange(0),
    default=None,
    help="mmc4, mmc4-reordered: at most this many images per document (default 6, VILA; 0: no limit).",
)
@click.option(
    "--preset",
    type=click.Choice(["core"]),
    default=None,
    help="mmc4, mmc4-reordered: core = mmc4-core (4-40 sentences, 2-15 images, 75% of sims > 0.25).",
)
@click.option(
    "--keep-imageless",
    is_flag=True,
    default=None,
    help="mmc4, mmc4-reordered: keep documents left with no image (as text) instead of dropping them.",
)
@click.option(
    "--caption",
    type=click.Choice(["reference", "attribution", "alt", "best"]),
    default=None,
    help="wit: which caption (default reference; best = first non-empty of reference, alt, attribution).",
)
@click.option(
    "--languages", default=None, help="wit: comma-separated language codes to keep, e.g. en,de."
)
@click.option(
    "--with-context",
    is_flag=True,
    default=None,
    help="wit: put page_title and context_section_description before the caption.",
)
@click.option(
    "--clip-model",
    default=None,
    help="Score with this open_clip architecture (e.g. ViT-L-14) or open_clip config .json "
    "(mmc4, mmc4-reordered: and re-place each image before the sentence it matches).",
)
@click.option(
    "--clip-pretrained",
    default=None,
    help="open_clip pretrained tag (e.g. openai; needs network once) or a local checkpoint file.",
)
@click.option("--clip-batch-size", type=click.IntRange(1), default=32, show_default=True)
@click.option(
    "--clip-device",
    type=click.Choice(["auto", "cpu", "cuda"]),
    default="auto",
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
    help="Write image and text CLIP embeddings with ids to clip-embeddings-*.parquet beside the shards.",
)
@fetch_options.fetch_options
@click.argument("beam_args", nargs=-1, type=click.UNPROCESSED)
def build(
    corpus,
    inputs,
    output,
    tokenizer,
    seq_len,
    tokens_per_image,
    image_token_id,
    pad_id,
    image_size,
    resize_mode,
    samples_per_shard,
    pack_groups,
    pack,
    workers,
    runner,
    job_endpoint,
    environment_type,
    environment_config,
    project,
    region,
    temp_location,
    spark_master_url,
    flink_master,
    job_server_jar,
    overwrite,
    progress_every,
    allow_private_urls,
    smoke,
    clip_model,
    clip_pretrained,
    clip_batch_size,
    clip_device,
    clip_top_fraction,
    save_embeddings,
    beam_args,
    **flags,
):
    """Build CORPUS into WebDataset shards plus manifest.json.

    Beam pipeline options go after `--`, e.g. `-- --direct_running_mode=multi_threading`.
    """
    spec = catalog.get(corpus)
    _check_tokenizer(tokenizer)
    verbose = logging.getLogger().isEnabledFor(logging.INFO)
    try:
        runner_settings = RunnerSettings(
            # Remote runners size their own workers unless --workers is given.
            runner=runner,
            workers=workers or (os.cpu_count() or 1 if runner == "DirectRunner" else 1),
            job_endpoint=job_endpoint,
            environment_type=environment_type,
            environment_config=environment_config,
            project=project,
            region=region,
            temp_location=temp_location,
            spark_master_url=spark_master_url,
            flink_master=flink_master,
            job_server_jar=job_server_jar,
            beam_args=tuple(beam_args),
        )
        from apache_beam.io.filesystems import FileSystems

        FileSystems.set_options(
            pipeline_options(runner_settings, verbose=verbose)
        )  # s3 endpoint, keys
    except (RunnerError, SystemExit) as exc:  # Beam's argparse exits on a malformed option
        raise UsageFailure(
            str(exc) if isinstance(exc, RunnerError) else "invalid Beam options after --"
        ) from None
    # --min-clip-sim filters the computed score with --clip-model, else coyo's precomputed one
    min_clip_sim = flags.pop("min_clip_sim") if clip_model is not None else None
    if clip_model is not None and corpus not in CLIP_CORPORA:
        raise UsageFailure(
            f"--clip-model scores image-text pairs or documents ({', '.join(CLIP_CORPORA)}), "
            f"not {corpus}"
        )
    if clip_model is not None and corpus in DOCUMENT_CLIP_CORPORA:
        # a global top fraction of images inside documents is not defined; embeddings rows are pairs
        for flag, value in (
            ("--clip-top-fraction", clip_top_fraction),
            ("--save-embeddings", save_embeddings),
        ):
            if value:
                raise UsageFailure(
                    f"{flag} applies to pair corpora (coyo, mmc4-pairs, wit), not to {corpus} "
                    "documents (use --min-clip-sim to remove their low-scoring images)"
                )
    clip = _clip_settings(
        clip_model,
        clip_pretrained,
        batch_size=clip_batch_size,
        device=clip_device,
        min_sim=min_clip_sim,
        top_fraction=clip_top_fraction,
        save_embeddings=save_embeddings,
    )
    if output is None:
        output = os.path.join("corpora-out", corpus)
    if not inputs:
        if spec.sample is None:
            raise UsageFailure(f"--input is required for {corpus} (the bundled sample is MMC4)")
        # A fixed place, so that re-running the command resumes the same build.
        inputs = (spec.sample(os.path.join(tempfile.gettempdir(), "corpora-sample")),)
        click.echo(f"No --input given: building the bundled sample corpus ({inputs[0]})")
    inputs = resolve_inputs(tuple(inputs), spec)
    if "://" not in output:
        output = os.path.abspath(output)
    fetch_flags = {name: value for name, value in flags.items() if name.startswith("fetch_")}
    corpus_flags = {name: value for name, value in flags.items() if name not in fetch_flags}
    if fetch_flags["fetch_retry_failures"]:
        fetch_flags["fetch_retry_failures"] = _check_failures_file(
            fetch_flags["fetch_retry_failures"]
        )
    if (
        fetch_flags["fetch_max_aspect_ratio"] is not None
        and "max_aspect_ratio" in CORPUS_OPTIONS[corpus]
    ):
        # one flag, checked twice: on the source's own width/height before any download (coyo),
        # and on the decoded image
        corpus_flags["max_aspect_ratio"] = fetch_flags["fetch_max_aspect_ratio"]
    known = {name for names in CORPUS_OPTIONS.values() for name in names}
    if set(corpus_flags) - known:  # a build option added to the decorators but not to the signature
        raise RuntimeError(
            f"build options not mapped onto settings: {sorted(set(corpus_flags) - known)}"
        )
    corpus_options = {name: value for name, value in corpus_flags.items() if value is not None}
    for name in corpus_options:
        if name not in CORPUS_OPTIONS[corpus]:
            if name == "min_clip_sim":
                raise UsageFailure(
                    "--min-clip-sim needs --clip-model (without it, only coyo has precomputed scores)"
                )
            users = [c for c, names in sorted(CORPUS_OPTIONS.items()) if name in names]
            raise UsageFailure(
                f"--{name.replace('_', '-')} does not apply to {corpus} (only to {', '.join(users)})"
            )
    try:
        settings = build_settings.corpus_settings(
            corpus,
            inputs,
            output,
            tokenizer=tokenizer,
            seq_len=seq_len,
            tokens_per_image=tokens_per_image,
            image_token_id=image_token_id,
            pad_id=pad_id,
            samples_per_shard=samples_per_shard,
            pack_groups=pack_groups,
            pack=pack,
            clip=clip,
            **corpus_options,
        )
        settings = settings.replace(
            fetch=dataclasses.replace(
                settings.fetch,
                image_size=image_size,
                resize_mode=resize_mode,
                allow_private_urls=allow_private_urls,
            )
        )
        settings = settings.replace(
            fetch=dataclasses.replace(
                fetch_options.apply(settings.fetch, fetch_flags), progress_interval=progress_every
            )
        )
        if smoke:
            settings = build_settings.smoke(settings)
    except ValueError as exc:
        raise UsageFailure(str(exc)) from None
    if spec.check_input is not None:
        check_inputs(settings, spec)
    derived = settings.derived()
    where = f" ({runner_settings.workers} workers)" if runner == "DirectRunner" or workers else ""
    click.echo(f"Building {corpus} → {output} with {runner}{where}")
    click.echo("  " + ", ".join(f"{k}={v}" for k, v in derived.items()))
    if settings.corpus_options:
        click.echo("  " + ", ".join(f"{k}={v}" for k, v in settings.corpus_options.items()))

    from corpora.resume import SettingsChanged
    from pipelines.launch import execute

    try:
        outcome = execute(
            settings,
            runner_settings,
            overwrite=overwrite,
            verbose=verbose,
            progress_every=progress_every,
        )
    except (SettingsChanged, RunnerError) as exc:
        raise UsageFailure(str(exc)) from None
    except Exception as exc:  # the pipeline failed: one line, exit 1
        message = str(exc).strip().splitlines()
        click.echo(
            f"corpora: build failed: {message[-1] if message else type(exc).__name__}", err=True
        )
        if logging.getLogger().isEnabledFor(logging.INFO):
            raise
        sys.exit(1)
    if outcome.manifest is None:
        click.echo(
            f"Dry run: the {runner} job was built and validated; nothing was run or written."
        )
        return
    _print_summary(outcome.manifest)
    _print_run(outcome)


def _print_run(outcome) -> None:
    counters, rates = outcome.counters, outcome.throughput()
    resumed = counters.get("shards.resumed", 0)
    if resumed:
        click.echo(
            f"Resumed: {resumed} shard(s) were already complete and left as they were; "
            f"{counters.get('shards', 0)} written now"
        )
    click.echo(
        f"Throughput over {outcome.seconds:.1f} s: {rates['input_per_s']:.1f} input records/s, "
        f"{rates['images_per_s']:.1f} images/s, {rates['megabytes_per_s']:.2f} MB/s of shards"
    )
    images = {k[len("images.") :]: v for k, v in counters.items() if k.startswith("images.")}
    if images:
        click.echo("  image fetches: " + ", ".join(f"{k} {v}" for k, v in sorted(images.items())))


def _print_summary(manifest: dict) -> None:
    funnel, totals = manifest["funnel"], manifest["totals"]
    click.echo(
        f"Wrote {totals['shards']} shard(s), {totals['samples']} sequences, "
        f"{totals['documents']} documents, {totals['images']} images"
    )
    if manifest["shard_pattern"]:
        click.echo(f"  shards: {manifest['shard_pattern']}")
    click.echo(f"Funnel ({funnel['unit']}s): input {funnel['input']}, kept {funnel['kept']}")
    for reason, count in sorted(funnel["dropped"].items(), key=lambda kv: -kv[1]):
        click.echo(f"  dropped {reason}: {count}")
    click.echo("Statistics: stats.json (`corpora stats DIR`, `corpora report DIR`)")
    images = manifest.get("images")
    if images:
        click.echo(
            f"Images: {images['input']} attempted, {images['ok']} ok"
            + "".join(
                f", {reason} {n}"
                for reason, n in sorted(images["failed"].items(), key=lambda kv: -kv[1])
            )
        )
        if images["failed"]:
            click.echo(
                f"  failed URLs: {images['failures_file']} (rebuild them with --retry-failures)"
            )


@cli.command()
@click.argument("path")
@click.option(
    "--index", type=click.IntRange(0), default=0, show_default=True, help="Which sample to show."
)
def inspect(path, index):
    """Print one packed sample of a build directory or a shard readably."""
    from corpora.inspect import describe_sample, find_sample

    try:
        sample, manifest = find_sample(path, index)
    except (OSError, ValueError, IndexError) as exc:
        raise UsageFailure(str(exc)) from None
    click.echo(describe_sample(sample, manifest))


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
    "--model-type", type=click.Choice(["unigram", "bpe"]), default="unigram", show_default=True
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
    import fsspec

    from corpora.io import InputError
    from corpora.tokenize import file_sha256
    from corpora.tokenizer_train import iter_corpus_text, train_sentencepiece

    files = []
    for given in inputs:
        pattern = os.path.join(given, "*") if os.path.isdir(given) else given
        try:
            matched = [f for f in fsspec.open_files(pattern, "rb") if f.fs.isfile(f.path)]
        except Exception as exc:
            raise UsageFailure(f"cannot read input {given}: {str(exc).splitlines()[0]}") from None
        if not matched:
            raise UsageFailure(f"input not found: {given}")
        files += matched
    counted = {"texts": 0}

    def texts():
        for opened in files:
            with opened as stream:
                for text in iter_corpus_text(stream, opened.path):
                    counted["texts"] += 1
                    if counted["texts"] % 100_000 == 0:
                        click.echo(f"  read {counted['texts']} texts", err=True)
                    yield text

    click.echo(
        f"Training a {model_type} SentencePiece model, vocab {vocab_size}, on {len(files)} file(s)"
    )
    try:
        train_sentencepiece(
            texts(), output, vocab_size, model_type=model_type, input_sentence_size=max_sentences
        )
    except InputError as exc:
        raise UsageFailure(str(exc)) from None
    except (
        RuntimeError
    ) as exc:  # SentencePiece refuses: no text, vocab too small for the characters, ...
        if counted["texts"] == 0:
            raise UsageFailure("no text found in the inputs") from None
        reason = str(exc).strip().splitlines()[-1].rpartition("] ")[2]
        raise UsageFailure(f"training failed: {reason}") from None
    except OSError as exc:
        raise UsageFailure(f"cannot read or write: {exc}") from None
    import sentencepiece as spm

    size = spm.SentencePieceProcessor(model_file=output).get_piece_size()
    click.echo(
        f"Wrote {output}: {size} pieces from {counted['texts']} texts, sha256 {file_sha256(output)}"
    )


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
def stats(path, as_json):
    """Statistics of a build, recomputed from its shards.

    DIR_OR_MANIFEST is a build directory, its manifest.json, or one shard of it.
    """
    from corpora.stats import StatsInputError, format_table, stats_from_shards, stats_json

    try:
        result = stats_from_shards(path, _progress)
    except StatsInputError as exc:
        raise UsageFailure(str(exc)) from None
    click.echo(stats_json(result) if as_json else format_table(result), nl=not as_json)


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
def report(path, output, samples):
    """Write report.html: a build's statistics, charts and a gallery of packed samples."""
    from corpora.report import write_report
    from corpora.stats import StatsInputError

    try:
        written = write_report(path, output, samples, _progress)
    except StatsInputError as exc:
        raise UsageFailure(str(exc)) from None
    except OSError as exc:
        raise UsageFailure(f"cannot write report: {exc}") from None
    click.echo(f"Wrote {written}")


def main() -> None:
    cli(prog_name="corpora")


if __name__ == "__main__":
    main()
