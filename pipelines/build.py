"""The per-corpus build pipeline.

    read ─► fetch images ─► tokenize ─► pack (per group, in id order)
      ─► number sequences globally ─► write shards ─► manifest.json

Drops from every stage are flattened and counted by reason; the manifest is
written last, from side inputs, once every shard is complete.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from corpora import catalog
from corpora.manifest import MANIFEST, build_manifest
from corpora.record import stable_hash
from corpora.settings import BuildSettings
from corpora.tokenize import Tokenizer
from pipelines import transforms as t
from pipelines.runners import make_runner, pipeline_options


def _drop_counts(drops: beam.PCollection) -> beam.PCollection:
    return (
        drops
        | "DropReason" >> beam.Map(lambda d: (d.reason, d.count))
        | "SumByReason" >> beam.CombinePerKey(sum)
    )


def write_manifest(_, settings: BuildSettings, tokenizer: Tokenizer, shard_infos: list[dict],
                   input_counts: int, kept: int, dropped: list[tuple[str, int]],
                   clip: dict[str, Any] | None = None) -> dict[str, Any]:
    manifest = build_manifest(settings, tokenizer.info, shard_infos, input_counts, kept, dict(dropped), clip)
    final = FileSystems.join(settings.output, MANIFEST)
    temporary = final + ".tmp"
    with FileSystems.create(temporary) as stream:
        stream.write(json.dumps(manifest, indent=2, sort_keys=True).encode("utf-8") + b"\n")
    FileSystems.rename([temporary], [final])
    return manifest


def build_pipeline(pipeline: beam.Pipeline, settings: BuildSettings, tokenizer: Tokenizer) -> beam.PCollection:
    """Add the build of ``settings.corpus`` to ``pipeline``; returns the manifest."""
    spec = catalog.get(settings.corpus)
    read = (
        pipeline
        | "Inputs" >> beam.Create(list(settings.inputs))
        | "Match" >> fileio.MatchAll()
        | "Files" >> fileio.ReadMatches(compression=CompressionTypes.UNCOMPRESSED)
        | "Read" >> beam.ParDo(t.ReadSource(spec, settings)).with_outputs(t.DROPPED, t.INPUT, main="docs")
    )
    fetched = (
        read.docs
        | "Spread" >> beam.Reshuffle()
        | "Batch" >> beam.BatchElements(min_batch_size=8, max_batch_size=256)
        | "Fetch" >> beam.ParDo(t.FetchImages(spec, settings.fetch)).with_outputs(t.DROPPED, main="docs")
    )
    ready, drop_sources, clip_summary = fetched.docs, [read.dropped, fetched.dropped], None
    if settings.clip is not None:
        from pipelines.clip import ClipStage

        scored = fetched.docs | "Clip" >> ClipStage(settings.clip, settings.output)
        ready, clip_summary = scored.docs, beam.pvalue.AsSingleton(scored.summary)
        drop_sources.append(scored.dropped)
    packed = (
        ready
        | "Tokenize" >> beam.ParDo(t.Tokenize(tokenizer))
        | "Group" >> beam.Map(lambda d, n: (stable_hash(d.id) % n, d), settings.pack_groups)
        | "ByGroup" >> beam.GroupByKey()
        | "Pack" >> beam.ParDo(t.PackGroup(settings, tokenizer.info.pad_id)).with_outputs(
            t.COUNTS, t.KEPT, main="sequences")
    )
    shard_infos = (
        packed.sequences
        | "AssignShard" >> beam.Map(t.assign_shard, beam.pvalue.AsDict(packed.counts), settings.samples_per_shard)
        | "ByShard" >> beam.GroupByKey()
        | "WriteShard" >> beam.ParDo(t.WriteShard(settings))
    )
    drops = tuple(drop_sources) | "Drops" >> beam.Flatten()
    return (
        pipeline
        | "Finish" >> beam.Create([None])
        | "Manifest" >> beam.Map(
            write_manifest,
            settings=settings,
            tokenizer=tokenizer,
            shard_infos=beam.pvalue.AsList(shard_infos),
            input_counts=beam.pvalue.AsSingleton(read.input | "SumInput" >> beam.CombineGlobally(sum)),
            kept=beam.pvalue.AsSingleton(packed.kept | "SumKept" >> beam.CombineGlobally(sum)),
            dropped=beam.pvalue.AsList(_drop_counts(drops)),
            clip=clip_summary,
        )
    )


def run_build(settings: BuildSettings, runner: str = "DirectRunner", workers: int = 1,
              beam_args: Sequence[str] = (), verbose: bool = False) -> dict[str, Any]:
    """Build a corpus and return its manifest (read back from the output)."""
    tokenizer = Tokenizer(settings.tokenizer, settings.tokens_per_image,
                          settings.image_token_id, settings.pad_id)
    options = pipeline_options(runner, workers, beam_args, verbose)
    if not FileSystems.exists(settings.output):
        FileSystems.mkdirs(settings.output)
    pipeline = beam.Pipeline(runner=make_runner(options), options=options)
    build_pipeline(pipeline, settings, tokenizer)
    result = pipeline.run()
    result.wait_until_finish()
    with FileSystems.open(FileSystems.join(settings.output, MANIFEST),
                          compression_type=CompressionTypes.UNCOMPRESSED) as stream:
        return json.loads(stream.read())

