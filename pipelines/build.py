"""A build as its stage list (:mod:`corpora.stages`) on Beam, and its manifest.

    read ─► filter ─► spread ─► select ─► fetch ─► clip ─► layout ─► pack
      ─► manifest.json ─► stats.json

:func:`build_pipeline` applies every stage that applies to the corpus and
settings, in the list's order (:func:`pipelines.stages.run_stages`);
:func:`fetch_pipeline` (``corpora fetch``) applies the same list up to and
including ``fetch``. Records travel in batches (lists of a few hundred) from
the read on, since Beam's cost is per element; the stages call the core on
each record of a batch. The batches are spread over every worker right after
the metadata filter (``spread``), so one large input file is fetched and
tokenized on all workers, not on the one that read it; only a reference to
each batch crosses (:class:`pipelines.transforms.Spread`), and after the
tokenizer only references to documents and sequences do. A text corpus
(``spec.images`` false) runs no image stage. A global selection (a top
fraction, CLIP) takes records one by one and batches them again after.

Drops from every stage are flattened and counted by reason (the funnel) and
by stage and reason (the manifest's ``stages``); the manifest is written
last, from side inputs, once every shard is complete.
"""

from __future__ import annotations

from typing import Any

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from corpora import stages
from corpora.config import catalog
from corpora.config.settings import BuildSettings
from corpora.fetch.accounting import FAILURES, first_failure
from corpora.fetch.accounting import write_failures as write_failures_file
from corpora.shards.manifest import MANIFEST, build_manifest
from corpora.store.fetching import arrival_summary
from corpora.tokens.tokenizer import Tokenizer
from pipelines import storage
from pipelines.stages import Steps, run_stages
from pipelines.stats import WriteStats
from pipelines.store import remove_stash


def _drop_counts(drops: beam.PCollection) -> beam.PCollection:
    return (
        drops
        | "DropReason" >> beam.Map(lambda d: (d.reason, d.count))
        | "SumByReason" >> beam.CombinePerKey(sum)
    )


def _stage_drop_counts(build: Steps) -> beam.PCollection:
    """``((stage, reason), count)`` summed over the whole build."""
    per_stage = [
        drops | f"DropsOf{index}" >> beam.Map(lambda d, name=name: ((name, d.reason), d.count))
        for index, (name, drops) in enumerate(build.drops)
    ]
    return (
        tuple(per_stage) | "StageDrops" >> beam.Flatten() | "SumByStage" >> beam.CombinePerKey(sum)
    )


def _stage_reports(build: Steps) -> beam.PCollection:
    reports = [
        summary | f"ReportOf{index}" >> beam.Map(lambda r, name=name: (name, r))
        for index, (name, summary) in enumerate(build.reports)
    ]
    if not reports:
        return build.pipeline | "NoStageReports" >> beam.Create([])
    return tuple(reports) | "StageReports" >> beam.Flatten()


def stage_entries(
    active: tuple[stages.Stage, ...],
    dropped: list[tuple[tuple[str, str], int]],
    reports: list[tuple[str, dict]] = (),
) -> list[dict[str, Any]]:
    """The manifest's ``stages``: every stage the build ran, in order, with
    its drops by reason and its report, if any.

    >>> read, pack = stages.STAGES[0], stages.STAGES[-1]
    >>> stage_entries((read, pack), [(("read", "bad_json"), 2)])
    [{'name': 'read', 'dropped': {'bad_json': 2}}, {'name': 'pack', 'dropped': {}}]
    """
    by_stage: dict[str, dict[str, int]] = {}
    for (name, reason), count in dropped:
        by_stage.setdefault(name, {})[reason] = by_stage.get(name, {}).get(reason, 0) + count
    report_of = dict(reports)
    entries = []
    for stage in active:
        entry = {"name": stage.name, "dropped": dict(sorted(by_stage.get(stage.name, {}).items()))}
        if stage.name in report_of:
            entry["report"] = report_of[stage.name]
        entries.append(entry)
    return entries


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
    active: tuple[stages.Stage, ...] = (),
    stage_drops: list[tuple[tuple[str, str], int]] = (),
    stage_reports: list[tuple[str, dict]] = (),
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
    manifest["stages"] = stage_entries(active, stage_drops, stage_reports)
    storage.write_json(FileSystems.join(settings.output, MANIFEST), manifest)  # last, and atomic
    return manifest


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
    active = stages.active(spec, settings)
    build = Steps(pipeline, settings, spec, tokenizer, progress)
    run_stages(active, build)
    outputs = build.outputs
    for name in ("images", "failures", "arrived"):  # a text corpus fetches nothing
        if name not in outputs:
            outputs[name] = pipeline | f"No{name.capitalize()}" >> beam.Create([])
    image_counts = outputs["images"] | "SumImages" >> beam.CombinePerKey(sum)
    arrival_counts = outputs["arrived"] | "SumArrived" >> beam.CombinePerKey(sum)
    failure_files = write_failures(outputs["failures"], settings)
    removed = tuple(build.removed) | "ImagesRemoved" >> beam.Flatten()
    removed_counts = removed | "SumRemoved" >> beam.CombinePerKey(sum)
    drops = tuple(drops for _, drops in build.drops) | "Drops" >> beam.Flatten()
    manifest = (
        pipeline
        | "Finish" >> beam.Create([None])
        | "Manifest"
        >> beam.Map(
            write_manifest,
            settings=settings,
            tokenizer=tokenizer,
            shard_infos=beam.pvalue.AsList(outputs["shards"]),
            input_counts=beam.pvalue.AsSingleton(
                outputs["input"] | "SumInput" >> beam.CombineGlobally(sum)
            ),
            kept=beam.pvalue.AsSingleton(outputs["kept"] | "SumKept" >> beam.CombineGlobally(sum)),
            dropped=beam.pvalue.AsList(_drop_counts(drops)),
            images=beam.pvalue.AsList(image_counts),
            images_removed=beam.pvalue.AsList(removed_counts),
            arrived=beam.pvalue.AsList(arrival_counts) if settings.store.used else None,
            failure_files=beam.pvalue.AsList(failure_files),
            clip=beam.pvalue.AsSingleton(outputs["clip"]) if "clip" in outputs else None,
            selection=(
                beam.pvalue.AsSingleton(outputs["selection"]) if "selection" in outputs else None
            ),
            active=active,
            stage_drops=beam.pvalue.AsList(_stage_drop_counts(build)),
            stage_reports=beam.pvalue.AsList(_stage_reports(build)),
        )
    )
    _ = manifest | "Stats" >> WriteStats(outputs["sequence_stats"], settings.output)
    _ = manifest | "RemoveStash" >> beam.Map(remove_stash, output=settings.output)
    return manifest


def fetch_pipeline(pipeline: beam.Pipeline, settings: BuildSettings) -> None:
    """``corpora fetch``: the build's stage list up to and including the fetch,
    into ``settings.store``, and nothing after: the records are dropped once
    their images are kept."""
    spec = catalog.get(settings.corpus)
    fetching = stages.through(stages.FETCH, stages.active(spec, settings))
    run_stages(fetching, Steps(pipeline, settings, spec, purpose="fetch"))
