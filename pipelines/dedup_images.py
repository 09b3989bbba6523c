"""The image dedup rules as Beam steps (the rules: :mod:`corpora.dedup.images`).

Every step takes the build's batches of records and returns the batches
kept; no step holds every hash in one place:

- :class:`ExactImages`: occurrences grouped by key (URL before the fetch,
  sha256 after it; they cross in partitions of the keys, one element per
  partition a batch fills), each group decided alone (``duplicate_image``,
  ``image_repeated``);
- :class:`NearImages`: perceptual hashes filed under their LSH bands
  (:mod:`corpora.dedup.lsh`), each bucket compared alone; the near pairs
  joined into clusters by a union-find combine (:class:`Components`: it
  holds the near pairs, a small share of the images, never the hashes),
  evaluation images matched in the same buckets (``near_duplicate_image``,
  ``eval_contamination``).

What leaves is applied to the batches through a side input of the removals
only: one dict, record id → its entries (:class:`ByRecord`), which each
bundle reads once; a multimap side input would ask the runner again for
every record of every batch. After the fetch the records hold their images:
each batch is written once to the build's stash (:class:`Look`) and read
back where the removals are applied, so the runner holds a reference per
batch while the decisions are made, never the images (as
:class:`pipelines.transforms.Spread` does). Every decision depends on
record ids and hashes only, so the output is the same whatever the runner,
the batches and the worker count.
"""

from __future__ import annotations

import functools
from typing import Callable, Iterable, Iterator

import apache_beam as beam
from apache_beam.metrics import Metrics

from corpora.dedup import images as rules
from corpora.dedup.lsh import band_keys, near_pairs
from corpora.dedup.phash import phash_hex
from corpora.record import Document, Drop
from corpora.store.stash import RECORDS
from pipelines.dedup_text import part_of
from pipelines.store import StashReader, stash_files, stashed
from pipelines.transforms import DROPPED, NAMESPACE, route_batch

FOUND = "found"  # what a rule needs of a batch: occurrences or hashes
THUMBS = "thumbnails"  # the report's thumbnails, made where a batch is read back

TOP = 8  # the most repeated images in a report
CLUSTERS = 4  # the largest near-duplicate clusters in a report, ...
CLUSTER_MEMBERS = 4  # ... with at most this many members each


class Look(beam.DoFn):
    """What a rule needs of each batch (``found``), and the batch itself: after
    the fetch, written once to the build's stash with only its reference going
    on (``output``), so the runner never holds the images while the rule's
    decisions are made; before the fetch (no ``output``), as it is."""

    def __init__(self, looks: Callable[[list[Document]], Iterable], output: str | None):
        self._looks = looks
        self._output = output
        self._files = None

    def setup(self) -> None:
        if self._output is not None:
            self._files = stash_files(self._output, RECORDS)

    def process(self, batch: list[Document]) -> Iterator:
        for item in self._looks(batch):
            yield beam.pvalue.TaggedOutput(FOUND, item)
        yield stashed(self._files, batch)


class ApplyRemovals(beam.DoFn):
    """A batch (read back from the stash) with the removals of its records
    applied: the records kept as one batch, drops to ``dropped``, and the
    thumbnails of the images the report shows (``wanted``) to ``thumbnails``."""

    def __init__(self, stage: str, drop_document: bool):
        self._stage = stage
        self._drop_document = drop_document

    def setup(self) -> None:
        self._reader = StashReader()

    def teardown(self) -> None:
        self._reader.close()

    def process(self, value, entries, wanted) -> Iterator:
        batch = self._reader.get(value)
        for item in _thumbnails(batch, wanted):
            yield beam.pvalue.TaggedOutput(THUMBS, item)
        results = []
        for doc in batch:
            found = entries.get(doc.id, ())  # nothing for a record without removals
            result = rules.apply_removals(doc, found, self._drop_document)
            if result is not doc and not isinstance(result, Drop):
                removed = dict(result.meta.get("images_removed") or {})
                before = dict(doc.meta.get("images_removed") or {})
                for reason in rules.REASONS:
                    count = removed.get(reason, 0) - before.get(reason, 0)
                    if count:
                        Metrics.counter(NAMESPACE, f"{self._stage}.{reason}").inc(count)
            results.append(result)
        yield from route_batch(results, self._stage)


class ByRecord(beam.CombineFn):
    """``(record id, entry)`` pairs into one dict, record id → its entries (in
    no particular order: :func:`corpora.dedup.images.apply_removals` does not
    depend on it). It holds the removals only, a small share of the images."""

    def create_accumulator(self) -> dict:
        return {}

    def add_input(self, found: dict, pair) -> dict:
        found.setdefault(pair[0], []).append(pair[1])
        return found

    def merge_accumulators(self, accumulators) -> dict:
        merged: dict = {}
        for found in accumulators:
            for record, entries in found.items():
                merged.setdefault(record, []).extend(entries)
        return merged

    def extract_output(self, found: dict) -> dict:
        return found


def _by_record(entries: beam.PCollection, name: str) -> beam.pvalue.AsSingleton:
    """The removals as one side input (:class:`ByRecord`)."""
    return beam.pvalue.AsSingleton(entries | f"{name}ByRecord" >> beam.CombineGlobally(ByRecord()))


def _thumbnails(batch: list[Document], wanted: dict) -> Iterator[tuple]:
    for doc in batch:
        for position, image in enumerate(doc.images):
            if (doc.id, position) in wanted and image.data is not None:
                yield (doc.id, position), (image.url, rules.thumbnail(image.data))


def _occurrences(batch: list[Document], key_of) -> list:
    """A batch's ``(key, occurrence)`` pairs as ``(partition, [pairs])``: one
    element per partition of the keys the batch fills (:func:`part_of`), not
    one per image (Beam's cost is per element)."""
    parts: dict[int, list] = {}
    for doc in batch:
        for pair in rules.occurrences(doc, key_of):
            parts.setdefault(part_of(pair[0]), []).append(pair)
    return sorted(parts.items())


def _key_groups(part) -> Iterator[tuple]:
    """A partition's pairs from every batch → ``(key, [occurrences])`` per key."""
    groups: dict = {}
    for pairs in part[1]:
        for key, occurrence in pairs:
            groups.setdefault(key, []).append(occurrence)
    return iter(sorted(groups.items()))


def _buckets(batch: list[Document], radius: int) -> list:
    """A batch's hashes filed under their bands: one element per bucket the
    batch fills (``((band, bits), [(node, hex), …])``), not one per image and
    band: Beam's cost is per element, and a radius of 12 makes 13 bands."""
    buckets: dict = {}
    for doc in batch:
        for position, image in enumerate(doc.images):
            value = image.meta.get(rules.PHASH)
            if value is None:
                continue
            node = ((doc.id, position), phash_hex(value))
            for band in band_keys(value, radius):
                buckets.setdefault(band, []).append(node)
    return sorted(buckets.items())


def _removed_counts(entries: beam.PCollection, label: str) -> beam.PCollection:
    return (
        entries
        | f"{label}Reasons"
        >> beam.FlatMap(lambda e: [(e[1][1], 1)] if isinstance(e[1][1], str) else [])
        | f"{label}SumReasons" >> beam.CombinePerKey(sum)
    )


class ExactImages(beam.PTransform):
    """``duplicate_image`` and ``image_repeated`` by one key (``"url"`` or
    ``"bytes"``). Returns ``{"docs", "dropped", "report"}``; the report is one
    dict: images removed by reason and the most repeated images (with
    thumbnails when the records hold bytes)."""

    def __init__(
        self,
        name: str,
        key: str,
        dedup: bool,
        max_repeats,
        drop_document: bool,
        output: str | None = None,
    ):
        super().__init__()
        self._output = output
        self._name = name
        self._key = key
        self._dedup = dedup
        self._max_repeats = max_repeats
        self._drop_document = drop_document

    def expand(self, batches):
        name, dedup, max_repeats = self._name, self._dedup, self._max_repeats
        key_of: Callable = rules.url_key if self._key == "url" else rules.bytes_key
        looked = batches | f"{name}Look" >> beam.ParDo(
            Look(functools.partial(_occurrences, key_of=key_of), self._output)
        ).with_outputs(FOUND, main="batches")
        groups = (
            looked[FOUND]
            | f"{name}ByPart" >> beam.GroupByKey()
            | f"{name}ByKey" >> beam.FlatMap(_key_groups)
        )
        removals = groups | f"{name}Decide" >> beam.FlatMap(_decided, dedup, max_repeats)
        entries = [removals]
        if self._key == "url":  # the copy kept counts the documents of the others
            entries.append(
                groups
                | f"{name}Counted"
                >> beam.FlatMap(lambda kv: [(r, (p, n)) for r, p, n in _kept(kv[1])])
            )
        entries = tuple(entries) | f"{name}Entries" >> beam.Flatten()
        top = (
            groups
            | f"{name}Repeats"
            >> beam.Map(lambda kv: (rules.documents_of(kv[1]), kv[0], min(kv[1])))
            | f"{name}Top" >> beam.combiners.Top.Of(TOP, key=lambda t: (t[0], _reverse(t[1])))
        )
        wanted = top | f"{name}Wanted" >> beam.Map(
            lambda found: {(o.record_id, o.position) for n, _, o in found if n > 1}
        )
        applied = looked.batches | f"{name}Apply" >> beam.ParDo(
            ApplyRemovals(name, self._drop_document),
            _by_record(entries, name),
            beam.pvalue.AsSingleton(wanted),
        ).with_outputs(DROPPED, THUMBS, main="docs")
        thumbs = applied[THUMBS]
        report = (
            batches.pipeline
            | f"{name}Finish" >> beam.Create([None])
            | f"{name}Report"
            >> beam.Map(
                _exact_report,
                key=self._key,
                removed=beam.pvalue.AsList(_removed_counts(removals, name)),
                top=beam.pvalue.AsSingleton(top),
                thumbs=beam.pvalue.AsList(thumbs),
            )
        )
        return {"docs": applied.docs, "dropped": applied[DROPPED], "report": report}


def _decided(item, dedup: bool, max_repeats) -> list:
    return [(r, (p, why)) for r, p, why in rules.decide_exact(item[1], dedup, max_repeats)]


def _kept(group) -> list:
    found = rules.kept_documents(group)
    return [found] if found is not None else []


def _reverse(text: str) -> tuple:
    """A key that sorts ``text`` descending, so Top's ties go to the smallest key."""
    return tuple(-ord(c) for c in text) + (1,)


def _exact_report(_, key, removed, top, thumbs) -> dict:
    thumbnails = dict(thumbs)
    repeated = []
    for documents, value, first in sorted(top, key=lambda t: (-t[0], t[1])):
        if documents < 2:
            continue
        entry = {key if key == "url" else "sha256": value, "documents": documents}
        found = thumbnails.get((first.record_id, first.position))
        if found is not None:
            entry["url"], entry["thumbnail"] = found
        repeated.append(entry)
    return {"removed": dict(sorted(removed)), "most_repeated": repeated}


def _pairs_in_bucket(item, radius: int, near: bool) -> Iterator[tuple]:
    """A bucket's near pairs between images (``("edge", (a, b))``, with ``near``)
    and an image's hit on an evaluation image (``("eval", node)``)."""
    (band, _), parts = item
    # hashes cross as hex: Beam's integer coder stops at 2**63
    members = [(node, int(value, 16)) for part in parts for node, value in part]
    # an evaluation image's node is ("", index): no record id is empty
    for a, b in near_pairs(members, radius, band):
        if a[0] == "" and b[0] == "":
            continue
        if a[0] == "" or b[0] == "":
            yield "eval", (b if a[0] == "" else a)
        elif near:
            yield "edge", (a, b)


class NearImages(beam.PTransform):
    """``near_duplicate_image`` (with ``near``) and ``eval_contamination``
    (with ``eval_hashes``) on the perceptual hashes the fetch stage added.
    Returns ``{"docs", "dropped", "report"}``."""

    def __init__(
        self,
        name: str,
        radius: int,
        near: bool,
        drop_document: bool,
        eval_hashes: tuple[int, ...] = (),
        sources: tuple[dict, ...] = (),
        output: str | None = None,
    ):
        super().__init__()
        self._output = output
        self._name, self._radius, self._near = name, radius, near
        self._drop_document = drop_document
        self._eval_hashes, self._sources = tuple(eval_hashes), tuple(sources)

    def expand(self, batches):
        name, radius, near = self._name, self._radius, self._near
        pipeline = batches.pipeline
        looked = batches | f"{name}Look" >> beam.ParDo(
            Look(functools.partial(_buckets, radius=radius), self._output)
        ).with_outputs(FOUND, main="batches")
        evals = pipeline | f"{name}EvalHashes" >> beam.Create(
            [
                (band, [(("", index), phash_hex(value))])
                for index, value in enumerate(self._eval_hashes)
                for band in band_keys(value, radius)
            ]
        )
        found = (
            (looked[FOUND], evals)
            | f"{name}AllBuckets" >> beam.Flatten()
            | f"{name}Buckets" >> beam.GroupByKey()
            | f"{name}Pairs" >> beam.FlatMap(_pairs_in_bucket, radius=radius, near=near)
        )
        hits = (
            found
            | f"{name}Hits" >> beam.FlatMap(lambda f: [f[1]] if f[0] == "eval" else [])
            | f"{name}OneHit" >> beam.Distinct()
            | f"{name}HitEntries"
            >> beam.Map(lambda node: (node[0], (node[1], rules.EVAL_CONTAMINATION)))
        )
        edges = found | f"{name}Edges" >> beam.FlatMap(lambda f: [f[1]] if f[0] == "edge" else [])
        labels = _components(edges, name)
        near_entries = labels | f"{name}NearEntries" >> beam.FlatMap(
            lambda kv: [(r, (p, why)) for r, p, why in rules.near_removals([kv])]
        )
        entries = (hits, near_entries) | f"{name}Entries" >> beam.Flatten()
        clusters = (
            labels
            | f"{name}ByLabel" >> beam.Map(lambda kv: (kv[1], kv[0]))
            | f"{name}Clusters" >> beam.GroupByKey()
            | f"{name}Sized" >> beam.Map(lambda kv: (len(kv[1]), kv[0], sorted(kv[1])))
        )
        largest = clusters | f"{name}Largest" >> beam.combiners.Top.Of(
            CLUSTERS, key=lambda c: (c[0], _reverse_node(c[1]))
        )
        sizes = clusters | f"{name}CountClusters" >> beam.combiners.Count.Globally()
        wanted = largest | f"{name}Wanted" >> beam.Map(
            lambda top: {m for _, _, members in top for m in members[:CLUSTER_MEMBERS]}
        )
        applied = looked.batches | f"{name}Apply" >> beam.ParDo(
            ApplyRemovals(name, self._drop_document),
            _by_record(entries, name),
            beam.pvalue.AsSingleton(wanted),
        ).with_outputs(DROPPED, THUMBS, main="docs")
        thumbs = applied[THUMBS]
        report = (
            pipeline
            | f"{name}Finish" >> beam.Create([None])
            | f"{name}Report"
            >> beam.Map(
                _near_report,
                radius=radius,
                sources=self._sources,
                removed=beam.pvalue.AsList(_removed_counts(entries, name)),
                largest=beam.pvalue.AsSingleton(largest),
                clusters=beam.pvalue.AsSingleton(sizes),
                thumbs=beam.pvalue.AsList(thumbs),
            )
        )
        return {"docs": applied.docs, "dropped": applied[DROPPED], "report": report}


def _reverse_node(node: tuple[str, int]) -> tuple:
    return _reverse(node[0]) + (-node[1],)


class Components(beam.CombineFn):
    """Near pairs into clusters: a union-find whose roots are each cluster's
    smallest node, so the result does not depend on the order pairs arrive or
    how the runner splits them. It holds the near pairs only (a small share
    of the images), never the hashes."""

    def create_accumulator(self) -> dict:
        return {}

    def add_input(self, parent: dict, edge) -> dict:
        _union(parent, edge[0], edge[1])
        return parent

    def merge_accumulators(self, accumulators) -> dict:
        merged: dict = {}
        for parent in accumulators:
            for node, up in parent.items():
                _union(merged, node, up)
        return merged

    def extract_output(self, parent: dict) -> list:
        return sorted((node, _root(parent, node)) for node in parent)


def _root(parent: dict, node):
    parent.setdefault(node, node)
    while parent[node] != node:
        parent[node] = parent[parent[node]]
        node = parent[node]
    return node


def _union(parent: dict, a, b) -> None:
    ra, rb = _root(parent, a), _root(parent, b)
    if ra != rb:
        parent[max(ra, rb)] = min(ra, rb)


def _components(edges: beam.PCollection, name: str) -> beam.PCollection:
    """Each node of ``edges`` with its cluster's smallest node."""
    return (
        edges
        | f"{name}Components" >> beam.CombineGlobally(Components())
        | f"{name}Labels" >> beam.FlatMap(lambda labels: labels)
    )


def _near_report(_, radius, sources, removed, largest, clusters, thumbs) -> dict:
    thumbnails = dict(thumbs)
    shown = []
    for size, label, members in sorted(largest, key=lambda c: (-c[0], c[1])):
        shown.append(
            {
                "size": size,
                "kept": {"record_id": label[0], "position": label[1]},
                "members": [
                    {
                        "record_id": m[0],
                        "position": m[1],
                        **(
                            {"url": thumbnails[m][0], "thumbnail": thumbnails[m][1]}
                            if m in thumbnails
                            else {}
                        ),
                    }
                    for m in members[:CLUSTER_MEMBERS]
                ],
            }
        )
    report = {
        "radius": radius,
        "removed": dict(sorted(removed)),
        "clusters": clusters,
        "largest_clusters": shown,
    }
    if sources:
        report["decontaminate"] = list(sources)
    return report


# The steps of the stage list (corpora.stages): step(stage, batches, build) -> batches.


def _exact_step(stage, batches, build, key: str):
    settings = rules.image_dedup(build.settings)
    found = batches | stage.name >> ExactImages(
        stage.name,
        key,
        settings.exact,
        settings.max_repeats,
        build.spec.drop_on_image_failure,
        # after the fetch the batches hold images: stashed while the groups decide
        output=build.settings.output if key == "bytes" else None,
    )
    build.dropped(stage.name, found["dropped"])
    build.report(stage.name, found["report"])
    return found["docs"]


def image_urls_step(stage, batches, build):
    """Before the fetch: one record per image URL (``duplicate_image``) and no
    URL in more than ``--max-image-repeats`` documents (``image_repeated``)."""
    return _exact_step(stage, batches, build, "url")


def image_bytes_step(stage, batches, build):
    """After the fetch: one record per image body, by sha256, and the repeats
    of a body under several URLs."""
    return _exact_step(stage, batches, build, "bytes")


def near_images_step(stage, batches, build):
    """After the fetch and the exact steps: near duplicates (``--dedup-images
    near``) and evaluation images (``--decontaminate`` folders and parquets)."""
    from corpora.dedup.evaluation import read_eval_images

    settings = rules.image_dedup(build.settings)
    sources = [read_eval_images(p) for p in settings.decontaminate]  # the image sources only
    found = batches | stage.name >> NearImages(
        stage.name,
        settings.distance,
        settings.near,
        build.spec.drop_on_image_failure,
        eval_hashes=tuple(h for source in sources for h in source.hashes),
        sources=tuple(source.summary() for source in sources),
        output=build.settings.output,
    )
    build.dropped(stage.name, found["dropped"])
    build.report(stage.name, found["report"])
    return found["docs"]
