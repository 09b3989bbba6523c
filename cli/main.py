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


def _clip_settings(model, pretrained, **options):
    """CLIP flags → ClipSettings, loading the model once here so a bad name or
    checkpoint fails now, in one line, rather than inside a worker."""
    if model is None:
        given = [flag for flag, value in (("--clip-pretrained", pretrained), ("--min-clip-sim", options["min_sim"]),
                                          ("--clip-top-fraction", options["top_fraction"]),
                                          ("--save-embeddings", options["save_embeddings"])) if value]
        if given:
            raise UsageFailure(f"{given[0]} needs --clip-model")
        return None
    if pretrained is None:
        raise UsageFailure("--clip-model needs --clip-pretrained (an open_clip tag such as openai, "
                           "or a local checkpoint file)")
    from corpora import clip

    try:
        settings = clip.clip_settings(model, pretrained, **options)
        device = clip.resolve_device(settings.device)
        loaded = clip.load_clip(settings, device="cpu")
    except clip.ClipModelError as exc:
        raise UsageFailure(str(exc)) from None
    click.echo(f"CLIP: {settings.model_id}, embedding dim {loaded.embed_dim}, batch {settings.batch_size}, "
               f"device {device}")
    return settings


def resolve_inputs(inputs: tuple[str, ...], spec: catalog.CorpusSpec) -> tuple[str, ...]:
    """Expand directories to the corpus's file patterns; check each input matches
    files that can be opened."""
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems

    resolved = []
    for given in inputs:
        patterns = [given]
        if os.path.isdir(given):
            patterns = [os.path.join(given, p) for p in spec.input_patterns]
        matched = []
        for pattern in patterns:
            try:
                matched += [m.path for m in FileSystems.match([pattern])[0].metadata_list]
            except Exception as exc:  # Beam raises BeamIOError and friends
                raise UsageFailure(f"cannot read input {given}: {str(exc).splitlines()[0]}") from None
        if not matched:
            raise UsageFailure(f"input not found: {given}")
        for path in sorted(matched):
            try:
                with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as stream:
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
@click.option("--workers", type=click.IntRange(1), default=None, help="DirectRunner worker processes. Default: all cores.")
@click.option("--runner", default="DirectRunner", show_default=True)
@click.option("--allow-private-urls", is_flag=True,
              help="Fetch from loopback, private and link-local addresses (refused by default).")
@click.option("--smoke", is_flag=True, help="Laptop-sized settings: seq_len 256, 16 tokens per image, 64 px.")
@click.option("--clip-model", default=None,
              help="Score with this open_clip architecture (e.g. ViT-L-14) or open_clip config .json.")
@click.option("--clip-pretrained", default=None,
              help="open_clip pretrained tag (e.g. openai; needs network once) or a local checkpoint file.")
@click.option("--clip-batch-size", type=click.IntRange(1), default=32, show_default=True)
@click.option("--clip-device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True,
              help="auto: CUDA (float16) where torch sees a GPU, else the CPU.")
@click.option("--min-clip-sim", type=float, default=None, help="Drop records whose computed CLIP score is lower.")
@click.option("--clip-top-fraction", type=float, default=None,
              help="Keep this fraction of records with the highest CLIP score over the whole corpus.")
@click.option("--save-embeddings", is_flag=True,
              help="Write image and text CLIP embeddings with ids to clip-embeddings-*.parquet beside the shards.")
@click.argument("beam_args", nargs=-1, type=click.UNPROCESSED)
def build(corpus, inputs, output, tokenizer, seq_len, tokens_per_image, image_token_id, pad_id, image_size,
          resize_mode, samples_per_shard, pack_groups, workers, runner, allow_private_urls, smoke,
          clip_model, clip_pretrained, clip_batch_size, clip_device, min_clip_sim, clip_top_fraction,
          save_embeddings, beam_args):
    """Build CORPUS into WebDataset shards plus manifest.json.

    Beam pipeline options go after `--`, e.g. `-- --direct_running_mode=multi_threading`.
    """
    spec = catalog.get(corpus)
    _check_tokenizer(tokenizer)
    clip = _clip_settings(clip_model, clip_pretrained, batch_size=clip_batch_size, device=clip_device,
                          min_sim=min_clip_sim, top_fraction=clip_top_fraction, save_embeddings=save_embeddings)
    if output is None:
        output = os.path.join("corpora-out", corpus)
    if not inputs:
        if corpus != "mmc4-pairs":
            raise UsageFailure(f"--input is required for {corpus} (the bundled sample is MMC4)")
        from corpora.sample import materialize_sample

        inputs = (materialize_sample(tempfile.mkdtemp(prefix="corpora-sample-")),)
        click.echo(f"No --input given: building the bundled sample corpus ({inputs[0]})")
    inputs = resolve_inputs(tuple(inputs), spec)
    if "://" not in output:
        output = os.path.abspath(output)
    try:
        settings = build_settings.BUILDERS[corpus](
            inputs, output, tokenizer=tokenizer, seq_len=seq_len, tokens_per_image=tokens_per_image,
            image_token_id=image_token_id, pad_id=pad_id, samples_per_shard=samples_per_shard,
            pack_groups=pack_groups, clip=clip,
        )
        settings = settings.replace(fetch=dataclasses.replace(
            settings.fetch, image_size=image_size, resize_mode=resize_mode, allow_private_urls=allow_private_urls))
        if smoke:
            settings = build_settings.smoke(settings)
    except ValueError as exc:
        raise UsageFailure(str(exc)) from None
    workers = workers or os.cpu_count() or 1
    derived = settings.derived()
    click.echo(f"Building {corpus} → {output} with {runner} ({workers} workers)")
    click.echo("  " + ", ".join(f"{k}={v}" for k, v in derived.items()))

    from pipelines.build import run_build

    try:
        manifest = run_build(settings, runner=runner, workers=workers, beam_args=beam_args,
                             verbose=logging.getLogger().isEnabledFor(logging.INFO))
    except Exception as exc:  # the pipeline failed: one line, exit 1
        message = str(exc).strip().splitlines()
        click.echo(f"corpora: build failed: {message[-1] if message else type(exc).__name__}", err=True)
        if logging.getLogger().isEnabledFor(logging.INFO):
            raise
        sys.exit(1)
    _print_summary(manifest)


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
