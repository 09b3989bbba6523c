"""The per-corpus build pipeline.

    read ─► metadata filter ─► spread over the workers ─► fetch images ─► layout
      ─► tokenize ─► pack (:mod:`pipelines.packing`: plan per group, in key
      order; number sequences globally; write shards) ─► manifest.json ─► stats.json

Records travel in batches (lists of a few hundred) from the read on, since
Beam's cost is per element; the stages call the core on each record of a
batch. The batches are spread over every worker right after the read (the
metadata filter runs fused with it), so one large input file is fetched and
tokenized on all workers, not on the one that read it; only a reference to
each batch crosses (:class:`pipelines.transforms.Spread`), and after the
tokenizer only references to documents and sequences do. A text corpus
packs each batch where it tokenizes it (:class:`pipelines.packing.PackText`). A text corpus
(``spec.images`` false) runs no image stage. A global selection (a top
fraction, CLIP) takes records one by one and batches them again after.

Drops from every stage are flattened and counted by reason; the manifest is
written last, from side inputs, once every shard is complete.
"""

from __future__ import annotations

from typing import Any, Sequence

import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from corpora.config import catalog
from corpora.config.settings import BuildSettings
from corpora.config.spec import CLIP_DOCUMENTS
from corpora.fetch.accounting import FAILURES, first_failure
from corpora.fetch.accounting import write_failures as write_failures_file
from corpora.shards.manifest import MANIFEST, build_manifest
from corpora.store.fetching import arrival_summary
from corpora.tokens.pack_groups import packs_where_tokenized
from corpora.tokens.tokenizer import Tokenizer
from pipelines import storage
from pipelines import transforms as t
from pipelines.packing import PackSequences, PackText
from pipelines.stats import WriteStats, token_ids
from pipelines.store import MarkComplete, remove_stash


def _drop_counts(drops: beam.PCollection) -> beam.PCollection:
    return (
        drops
        | "DropReason" >> beam.Map(lambda d: (d.reason, d.count))
        | "SumByReason" >> beam.CombinePerKey(sum)
    )


def write_failures(failures: beam.PCollection, settings: BuildSettings) -> beam.PCollection:
    """``failures.parquet`` beside the shards: one row per failed URL (written even when empty)."""
    rows = (
        failures
        | "FailureByUrl" >> beam.Map(lambda row: (row["url"], row))
        | "OneRowPerUrl" >> beam.CombinePerKey(first_failure)
        | "FailureRows" >> beam.Values()
    )
    return (
        failures.pipeline
        | "FailuresFile" >> beam.Create([FileSystems.join(settings.output, FAILURES)])
        | "WriteFailures" >> beam.Map(_write_failures, rows=beam.pvalue.AsIter(rows))
    )


def _write_failures(path: str, rows) -> str:
    with storage.create_atomically(path) as stream:
        write_failures_file(stream, rows)
    return path


def write_manifest(
    _,
    settings: BuildSettings,
    tokenizer: Tokenizer,
    shard_infos: list[dict],
    input_counts: int,
    kept: int,
    dropped: list[tuple[str, int]],
    images: list[tuple[str, int]] = (),
    images_removed: list[tuple[str, int]] = (),
    failure_files: list[str] = (),
    clip: dict[str, Any] | None = None,
    selection: dict[str, Any] | None = None,
    arrived: list[tuple[str, int]] | None = None,
) -> dict[str, Any]:
    manifest = build_manifest(
        settings,
        tokenizer.info,
        shard_infos,
        input_counts,
        kept,
        dict(dropped),
        images=dict(images),
        images_removed=dict(images_removed),
        clip=clip,
    )
    if selection is not None:
        manifest["top_fraction"] = selection  # where the global cut fell
    if arrived is not None:  # how the images came: fetched now, from the store, a download
        manifest["images_arrived"] = arrival_summary(dict(arrived))
    storage.write_json(FileSystems.join(settings.output, MANIFEST), manifest)  # last, and atomic
    return manifest


def input_files(pipeline: beam.Pipeline, inputs: Sequence[str]) -> beam.PCollection:
    """Readable input files: Beam's FileSystems (local, gs://, s3://) match and
    open theirs; fsspec (hf://) inputs are listed here and opened by workers."""
    beam_inputs = [i for i in inputs if not storage.uses_fsspec(i)]
    fsspec_files = [
        storage.FsspecFile(p) for i in inputs if storage.uses_fsspec(i) for p in storage.match(i)
    ]
    if not fsspec_files:
        return (
            pipeline
            | "Inputs" >> beam.Create(beam_inputs)
            | "Match" >> fileio.MatchAll()
            | "Files" >> fileio.ReadMatches(compression=CompressionTypes.UNCOMPRESSED)
        )
    files = [pipeline | "FsspecFiles" >> beam.Create(fsspec_files)]
    if beam_inputs:
        files.append(
            pipeline
            | "Inputs" >> beam.Create(beam_inputs)
            | "Match" >> fileio.MatchAll()
            | "Files" >> fileio.ReadMatches(compression=CompressionTypes.UNCOMPRESSED)
        )
    return files[0] if len(files) == 1 else tuple(files) | "AllFiles" >> beam.Flatten()


def build_pipeline(
    pipeline: beam.Pipeline,
    settings: BuildSettings,
    tokenizer: Tokenizer,
    progress: str | None = None,
) -> beam.PCollection:
    """Add the build of ``settings.corpus`` to ``pipeline``; returns the manifest.
    ``progress``: a folder on this machine where the read and fetch stages
    keep their counts for the build's progress line (a local build's)."""
    spec = catalog.get(settings.corpus)
    read = input_files(pipeline, settings.inputs) | "Read" >> beam.ParDo(
        t.ReadSource(spec, settings, progress)
    ).with_outputs(t.DROPPED, t.INPUT, main="docs")
    drops = [read.dropped]
    batches = read.docs  # from here on records travel in batches (lists)
    if spec.metadata_filter is not None:  # cheap, before any download
        filtered = batches | "Filter" >> beam.ParDo(
            t.ApplyStage(spec.metadata_filter, settings, "filter")
        ).with_outputs(t.DROPPED, main="docs")
        batches, drops = filtered.docs, drops + [filtered.dropped]
    batches = batches | "Spread" >> t.Spread(settings.output)
    selection, fraction = None, spec.top_fraction(settings)
    if fraction is not None:  # global, by the corpus's rank (coyo: the precomputed CLIP sum)
        from pipelines.selection import TopFraction

        selected = (
            batches | "UnbatchToSelect" >> beam.FlatMap(lambda batch: batch)
        ) | "TopFraction" >> TopFraction(spec.rank, fraction)
        batches = selected.kept | "Rebatch" >> t.record_batches()
        drops, selection = drops + [selected.dropped], beam.pvalue.AsSingleton(selected.summary)
    if spec.images:
        fetched = batches | "Fetch" >> beam.ParDo(
            t.FetchImages(spec, settings.fetch, settings.store, progress)
        ).with_outputs(t.DROPPED, t.IMAGES, t.FAILURES, t.ARRIVED, t.SPLITS, main="docs")
        _ = fetched[t.SPLITS] | "StoreMarkers" >> MarkComplete(settings.store)
        batches, drops = fetched.docs, drops + [fetched.dropped]
        image_outcomes, failures = fetched[t.IMAGES], fetched[t.FAILURES]
        arrivals = fetched[t.ARRIVED]
    else:  # the manifest still says that no image was fetched, and failures.parquet is empty
        image_outcomes = pipeline | "NoImages" >> beam.Create([])
        failures = pipeline | "NoFailures" >> beam.Create([])
        arrivals = pipeline | "NoArrivals" >> beam.Create([])
    clip_summary = None
    if settings.clip is not None:  # needs the image bytes; before the layout places images
        from pipelines.clip import ClipStage, DocumentClipStage

        stage = (
            DocumentClipStage(settings.clip)
            if spec.clip == CLIP_DOCUMENTS
            else ClipStage(settings.clip, settings.output)
        )
        scored = (batches | "UnbatchToScore" >> beam.FlatMap(lambda batch: batch)) | "Clip" >> stage
        batches = scored.docs | "RebatchScored" >> t.record_batches()
        clip_summary = beam.pvalue.AsSingleton(scored.summary)
        drops = drops + [scored.dropped]
    if spec.layout is not None:
        laid_out = batches | "Layout" >> beam.ParDo(
            t.ApplyStage(spec.layout, settings, "layout")
        ).with_outputs(t.DROPPED, main="docs")
        batches, drops = laid_out.docs, drops + [laid_out.dropped]
    image_counts = image_outcomes | "SumImages" >> beam.CombinePerKey(sum)
    arrival_counts = arrivals | "SumArrived" >> beam.CombinePerKey(sum)
    failure_files = write_failures(failures, settings)
    counted = batches | "CountRemovedImages" >> beam.ParDo(t.CountRemovedImages()).with_outputs(
        t.IMAGES_REMOVED, main="docs"
    )
    removed_counts = counted[t.IMAGES_REMOVED] | "SumRemoved" >> beam.CombinePerKey(sum)
    if packs_where_tokenized(spec, settings):  # a text corpus: no document stashed
        packed = counted.docs | "PackText" >> PackText(
            settings, tokenizer, token_ids(tokenizer.info)
        )
    else:
        tokenized = counted.docs | "Tokenize" >> beam.ParDo(t.Tokenize(tokenizer))
        packed = tokenized | "PackSequences" >> PackSequences(
            settings, tokenizer.info.pad_id, token_ids(tokenizer.info)
        )
    shard_infos = packed["shards"]
    drops = tuple(drops + [packed["dropped"]]) | "Drops" >> beam.Flatten()
    manifest = (
        pipeline
        | "Finish" >> beam.Create([None])
        | "Manifest"
        >> beam.Map(
            write_manifest,
            settings=settings,
            tokenizer=tokenizer,
            shard_infos=beam.pvalue.AsList(shard_infos),
            input_counts=beam.pvalue.AsSingleton(
                read.input | "SumInput" >> beam.CombineGlobally(sum)
            ),
            kept=beam.pvalue.AsSingleton(packed["kept"] | "SumKept" >> beam.CombineGlobally(sum)),
            dropped=beam.pvalue.AsList(_drop_counts(drops)),
            images=beam.pvalue.AsList(image_counts),
            images_removed=beam.pvalue.AsList(removed_counts),
            arrived=beam.pvalue.AsList(arrival_counts) if settings.store.used else None,
            failure_files=beam.pvalue.AsList(failure_files),
            clip=clip_summary,
            selection=selection,
        )
    )
    _ = manifest | "Stats" >> WriteStats(packed["sequence_stats"], settings.output)
    _ = manifest | "RemoveStash" >> beam.Map(remove_stash, output=settings.output)
    return manifest


def fetch_pipeline(pipeline: beam.Pipeline, settings: BuildSettings) -> None:
    """``corpora fetch``: a build's stages up to and including the fetch, into
    ``settings.store`` (read, metadata filter, top fraction, fetch, markers),
    and nothing after: the records are dropped once their images are kept."""
    spec = catalog.get(settings.corpus)
    read = input_files(pipeline, settings.inputs) | "Read" >> beam.ParDo(
        t.ReadSource(spec, settings)
    ).with_outputs(t.DROPPED, t.INPUT, main="docs")
    batches = read.docs  # in batches (lists), as in a build
    if spec.metadata_filter is not None:
        batches = (
            batches
            | "Filter"
            >> beam.ParDo(t.ApplyStage(spec.metadata_filter, settings, "filter")).with_outputs(
                t.DROPPED, main="docs"
            )
        ).docs
    fraction = spec.top_fraction(settings)
    if fraction is not None:
        from pipelines.selection import TopFraction

        docs = batches | "UnbatchToSelect" >> beam.FlatMap(lambda batch: batch)
        kept = (docs | "TopFraction" >> TopFraction(spec.rank, fraction)).kept
        batches = kept | "Rebatch" >> t.record_batches()
    fetched = (
        batches
        | "Spread" >> beam.Reshuffle()  # the records themselves: nothing after the fetch
        | "Fetch"
        >> beam.ParDo(t.FetchImages(spec, settings.fetch, settings.store)).with_outputs(
            t.DROPPED, t.IMAGES, t.FAILURES, t.ARRIVED, t.SPLITS, main="docs"
        )
    )
    _ = fetched[t.SPLITS] | "StoreMarkers" >> MarkComplete(settings.store)
