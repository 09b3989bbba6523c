"""The image dedup rules as Beam steps (the rules: :mod:`corpora.dedup.images`).

Every step takes the build's batches of records and returns the batches
kept; no step holds every hash in one place:

- :class:`ExactImages`: occurrences grouped by key (URL before the fetch,
  sha256 after it; they cross in partitions of the keys, one element per
  partition a batch fills), each group decided alone (``duplicate_image``,
  ``image_repeated``);
- :class:`NearImages`: perceptual hashes filed under their LSH bands
  (:mod:`corpora.dedup.lsh`; a band's buckets cross in :data:`BAND_PARTS`
  partitions), each bucket compared alone; the near pairs
  joined into clusters by a union-find combine and the hits on evaluation
  images matched in the same buckets gathered by it (:class:`NearFound`: it
  holds the near pairs, a small share of the images, never the hashes),
  the rule's decisions made from it in one step (:func:`_near_decided`;
  ``near_duplicate_image``, ``eval_contamination``).

What leaves is applied to the batches through a side input of the removals
only: one dict, record id → its entries (:class:`ByRecord`; the near rule's
in its decisions), which each bundle reads once; a multimap side input
would ask the runner again for every record of every batch. After the
fetch the records hold their images: each batch is written once to the
build's stash (:class:`Look`) and read back where the removals are applied
(once for the exact and the near rule together, :class:`PostFetchImages`,
when both run), so the runner holds a reference per batch while the
decisions are made, never the images (as
:class:`pipelines.transforms.Spread` does). Every decision depends on
record ids and hashes only, so the output is the same whatever the runner,
the batches and the worker count.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable, Iterable, Iterator

import apache_beam as beam
from apache_beam.metrics import Metrics

from corpora.dedup import images as rules
from corpora.dedup.lsh import band_bits, band_keys, find, merge, near_pairs, union
from corpora.record import Document, Drop
from corpora.store.stash import RECORDS
from pipelines.dedup_text import key_groups, partitioned
from pipelines.store import StashReader, stash_files, stashed
from pipelines.transforms import DROPPED, NAMESPACE, route_batch

FOUND = "found"  # what a rule needs of a batch: occurrences or hashes
BUCKETS = "buckets"  # ... the near rule's, when one pass looks for both
DROPPED_NEAR = "dropped_near"  # the near rule's drops, when one pass applies both
THUMBS = "thumbnails"  # the report's thumbnails, made where a batch is read back

TOP = 8  # the most repeated images in a report
CLUSTERS = 4  # the largest near-duplicate clusters in a report, ...
CLUSTER_MEMBERS = 4  # ... with at most this many members each
NEAR_REASONS = (rules.NEAR_DUPLICATE_IMAGE, rules.EVAL_CONTAMINATION)  # the near rule's


class Look(beam.DoFn):
    """What the rules need of each batch (``looks``: an output tag → what a rule
    takes of a batch), and the batch itself: after the fetch, written once to
    the build's stash with only its reference going on (``output``), so the
    runner never holds the images while the rules' decisions are made; before
    the fetch (no ``output``), as it is."""

    def __init__(self, looks: dict[str, Callable[[list[Document]], Iterable]], output: str | None):
        self._looks = looks
        self._output = output
        self._files = None

    def setup(self) -> None:
        if self._output is not None:
            self._files = stash_files(self._output, RECORDS)

    def process(self, batch: list[Document]) -> Iterator:
        for tag, look in self._looks.items():
            for item in look(batch):
                yield beam.pvalue.TaggedOutput(tag, item)
        yield stashed(self._files, batch)


class ApplyRemovals(beam.DoFn):
    """A batch (read back from the stash) with the removals of its records
    applied: the records kept as one batch, drops to ``dropped``, and the
    thumbnails of the images the report shows (``wanted``) to ``thumbnails``.

    ``entries`` (record id → its entries) and ``wanted`` are the exact rules';
    ``near``, the near rule's decisions (:func:`_near_decided`), whose entries
    and wanted images join them. With ``near_stage`` it applies two stages'
    removals at once (the exact rules' and the near rule's,
    :class:`PostFetchImages`): what the near rule removed is counted under
    ``near_stage`` and its drops go to ``dropped_near``, as if the stages had
    run one after the other."""

    def __init__(self, stage: str, drop_document: bool, near_stage: str | None = None):
        self._stage = stage
        self._drop_document = drop_document
        self._near_stage = near_stage

    def setup(self) -> None:
        self._reader = StashReader()

    def teardown(self) -> None:
        self._reader.close()

    def process(self, value, entries, wanted, near=None) -> Iterator:
        batch = self._reader.get(value)
        more = {} if near is None else near["entries"]
        if near is not None:
            wanted = wanted | near["wanted"]
        for item in _thumbnails(batch, wanted):
            yield beam.pvalue.TaggedOutput(THUMBS, item)
        results = []
        for doc in batch:
            found = entries.get(doc.id, ())  # nothing for a record without removals
            if doc.id in more:
                found = [*found, *more[doc.id]]
            result = rules.apply_removals(doc, found, self._drop_document)
            if result is not doc and not isinstance(result, Drop):
                removed = dict(result.meta.get("images_removed") or {})
                before = dict(doc.meta.get("images_removed") or {})
                for reason in rules.REASONS:
                    count = removed.get(reason, 0) - before.get(reason, 0)
                    if count:
                        Metrics.counter(NAMESPACE, f"{self._stage_of(reason)}.{reason}").inc(count)
            results.append(result)
        if self._near_stage is None:
            yield from route_batch(results, self._stage)
            return
        near = [r for r in results if isinstance(r, Drop) and r.reason in NEAR_REASONS]
        for drop in near:  # the exact stage passed these records on
            Metrics.counter(NAMESPACE, f"{self._stage}.out").inc()
            Metrics.counter(NAMESPACE, f"dropped.{drop.reason}").inc(drop.count)
            yield beam.pvalue.TaggedOutput(DROPPED_NEAR, drop)
        rest = [r for r in results if not (isinstance(r, Drop) and r.reason in NEAR_REASONS)]
        for item in route_batch(rest, self._stage):
            if isinstance(item, list):  # the records kept: past both stages
                Metrics.counter(NAMESPACE, f"{self._near_stage}.out").inc(len(item))
            yield item

    def _stage_of(self, reason: str) -> str:
        if self._near_stage is not None and reason in NEAR_REASONS:
            return self._near_stage
        return self._stage


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


def records_of(entries: beam.PCollection, name: str) -> beam.PCollection:
    """The removals as one element, record id → its entries (:class:`ByRecord`)."""
    return entries | f"{name}ByRecord" >> beam.CombineGlobally(ByRecord())


def by_record(entries: beam.PCollection, name: str) -> beam.pvalue.AsSingleton:
    """The removals as one side input (:class:`ByRecord`)."""
    return beam.pvalue.AsSingleton(records_of(entries, name))


def _thumbnails(batch: list[Document], wanted: dict) -> Iterator[tuple]:
    for doc in batch:
        for position, image in enumerate(doc.images):
            if (doc.id, position) in wanted and image.data is not None:
                yield (doc.id, position), (image.url, rules.thumbnail(image.data))


def _occurrences(batch: list[Document], key_of) -> list:
    """A batch's ``(key, occurrence)`` pairs as ``(partition, [pairs])``: one
    element per partition of the keys the batch fills (:func:`partitioned`),
    not one per image (Beam's cost is per element). An occurrence crosses as
    a plain tuple (:func:`_group_decided` makes it one again): Beam pickles a
    dataclass, with its class's name, in twice the bytes."""
    return partitioned(
        (key, (found.record_id, found.position, found.documents))
        for doc in batch
        for key, found in rules.occurrences(doc, key_of)
    )


BAND_PARTS = 8  # each band's buckets cross in this many partitions


def _buckets(batch: list[Document], radius: int) -> list:
    """A batch's hashes filed under their bands: one element per partition of
    a band's buckets the batch fills (``((band, bits % BAND_PARTS), (ids,
    positions, hashes))``: its images' record ids and positions, and their
    hashes packed, :func:`_packed`), not one per image and band, nor one per
    bucket: Beam's cost is per element, and a radius of 12 makes 13 bands of
    32 buckets. :func:`_pairs_in_bucket` works out each image's bucket again
    and compares each bucket of a partition alone.

    >>> from corpora.record import ImageChunk
    >>> doc = Document("r", "coyo", (ImageChunk("u", meta={rules.PHASH: 2**64 - 1}),))
    >>> (band, part), (ids, positions, hashes) = _buckets([doc], 0)[0]
    >>> (band, part, ids, positions, _unpacked(hashes) == [2**64 - 1])
    (0, 7, ['r'], [0], True)
    """
    parts: dict = {}
    for doc in batch:
        for position, image in enumerate(doc.images):
            value = image.meta.get(rules.PHASH)
            if value is None:
                continue
            for band, bits in band_keys(value, radius):
                ids, at, values = parts.setdefault((band, bits % BAND_PARTS), ([], [], []))
                ids.append(doc.id)
                at.append(position)
                values.append(value)
    return [(key, (ids, at, _packed(values))) for key, (ids, at, values) in sorted(parts.items())]


def _packed(values: list[int]) -> bytes:
    """64-bit hashes as 8 little-endian bytes each: what crosses the shuffle
    (Beam's integer coder stops at 2**63; hex took twice the bytes).

    >>> _unpacked(_packed([0, 2**64 - 1, 5]))
    [0, 18446744073709551615, 5]
    """
    import numpy as np

    return np.array(values, dtype="<u8").tobytes()


def _unpacked(packed: bytes) -> list[int]:
    import numpy as np

    return np.frombuffer(packed, dtype="<u8").tolist()


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
        name = self._name
        looked = batches | f"{name}Look" >> beam.ParDo(
            Look({FOUND: _occurrences_of(self._key)}, self._output)
        ).with_outputs(FOUND, main="batches")
        exact = _exact_decisions(looked[FOUND], name, self._key, self._dedup, self._max_repeats)
        records = records_of(exact.entries, name)
        applied = looked.batches | f"{name}Apply" >> beam.ParDo(
            ApplyRemovals(name, self._drop_document),
            beam.pvalue.AsSingleton(records),
            beam.pvalue.AsSingleton(exact.wanted),
        ).with_outputs(DROPPED, THUMBS, main="docs")
        report = _exact_report_of(exact, records, name, self._key, applied[THUMBS])
        return {"docs": applied.docs, "dropped": applied[DROPPED], "report": report}


def _occurrences_of(key: str) -> Callable:
    key_of: Callable = rules.url_key if key == "url" else rules.bytes_key
    return functools.partial(_occurrences, key_of=key_of)


@dataclasses.dataclass
class _Exact:
    """The exact rules' decisions (PCollections): every entry for
    :class:`ApplyRemovals`, the most repeated keys and the images whose
    thumbnails the report shows."""

    entries: beam.PCollection
    top: beam.PCollection
    wanted: beam.PCollection


REPEATS = "repeats"  # each key's documents, for the most repeated


def _exact_decisions(found, name: str, key: str, dedup: bool, max_repeats) -> _Exact:
    decided = (
        found
        | f"{name}ByPart" >> beam.GroupByKey()
        | f"{name}ByKey" >> beam.FlatMap(key_groups)
        | f"{name}Decide"
        >> beam.FlatMap(_group_decided, dedup, max_repeats, key == "url").with_outputs(
            REPEATS, main="entries"
        )
    )
    top = decided[REPEATS] | f"{name}Top" >> beam.combiners.Top.Of(
        TOP, key=lambda t: (t[0], _reverse(t[1]))
    )
    wanted = top | f"{name}Wanted" >> beam.Map(
        lambda found: {(o.record_id, o.position) for n, _, o in found if n > 1}
    )
    return _Exact(decided.entries, top, wanted)


def _group_decided(item, dedup: bool, max_repeats, counted: bool) -> Iterator:
    """One key's group → its removals ``(record, (position, reason))``; with
    ``counted`` (by URL), the copy kept with the others' documents
    ``(record, (position, n))``; and on :data:`REPEATS` ``(documents, key,
    first occurrence)`` (one step, not three over the groups: Beam's cost is
    per step and element)."""
    key, group = item[0], [rules.Occurrence(*found) for found in item[1]]
    for record, position, why in rules.decide_exact(group, dedup, max_repeats):
        yield record, (position, why)
    if counted:  # the copy kept counts the documents of the others
        for record, position, n in _kept(group):
            yield record, (position, n)
    yield beam.pvalue.TaggedOutput(REPEATS, (rules.documents_of(group), key, min(group)))


def _exact_report_of(exact: _Exact, records, name: str, key: str, thumbs) -> beam.PCollection:
    """The report, made from the one element of ``records`` (:func:`records_of`)."""
    return records | f"{name}Report" >> beam.Map(
        _exact_report,
        key=key,
        top=beam.pvalue.AsSingleton(exact.top),
        thumbs=beam.pvalue.AsList(thumbs),
    )


def _kept(group) -> list:
    found = rules.kept_documents(group)
    return [found] if found is not None else []


def _reverse(text: str) -> tuple:
    """A key that sorts ``text`` descending, so Top's ties go to the smallest key."""
    return tuple(-ord(c) for c in text) + (1,)


def _removed(entries: Iterable[list]) -> dict:
    """Images removed by reason, from each record's entries (a removal's is a
    reason; the copy kept by URL counts others' documents under a number).

    >>> _removed([[(0, "duplicate_image"), (1, 3)], [(2, "duplicate_image")]])
    {'duplicate_image': 2}
    """
    counts: dict = {}
    for found in entries:
        for _, why in found:
            if isinstance(why, str):
                counts[why] = counts.get(why, 0) + 1
    return dict(sorted(counts.items()))


def _exact_report(records: dict, key, top, thumbs) -> dict:
    removed = _removed(records.values())
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
    return {"removed": removed, "most_repeated": repeated}


def _pairs_in_bucket(
    item, radius: int, near: bool, exact: dict | None = None, drop_document: bool = False
) -> Iterator[tuple]:
    """A partition's near pairs (each bucket compared alone) between images
    (``("edge", (a, b))``, with ``near``) and an image's hit on an evaluation
    image (``("eval", node)``). ``exact``:
    the exact rules' entries by record (:class:`PostFetchImages`), whose
    removed images are left out, as if they had gone before this rule."""
    (band, _), parts = item
    buckets: dict = {}  # the partition's buckets, by the band's bits
    for ids, positions, packed in parts:
        for record, position, value in zip(ids, positions, _unpacked(packed)):
            node = (record, position)
            if not exact or not _removed_before(node, exact, drop_document):
                buckets.setdefault(band_bits(value, radius, band), []).append((node, value))
    for bits in sorted(buckets):
        # an evaluation image's node is ("", index): no record id is empty
        for a, b in near_pairs(buckets[bits], radius, band):
            if a[0] == "" and b[0] == "":
                continue
            if a[0] == "" or b[0] == "":
                yield "eval", (b if a[0] == "" else a)
            elif near:
                yield "edge", (a, b)


def _removed_before(node: tuple[str, int], exact: dict, drop_document: bool) -> bool:
    """Whether the exact rules removed the image ``node`` (or its record)."""
    return any(
        isinstance(why, str) and (drop_document or position == node[1])
        for position, why in exact.get(node[0], ())
    )


def _after_exact(node: tuple[str, int], exact: dict) -> tuple[str, int]:
    """An image's position once the exact rules' removals are applied to its
    record (what the near rule saw when it ran after them)."""
    record, position = node
    before = {p for p, why in exact.get(record, ()) if isinstance(why, str) and p < position}
    return record, position - len(before)


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
        name = self._name
        looked = batches | f"{name}Look" >> beam.ParDo(
            Look({FOUND: functools.partial(_buckets, radius=self._radius)}, self._output)
        ).with_outputs(FOUND, main="batches")
        near = _near_decisions(
            looked[FOUND], batches.pipeline, name, self._radius, self._near, self._eval_hashes
        )
        applied = looked.batches | f"{name}Apply" >> beam.ParDo(
            ApplyRemovals(name, self._drop_document), {}, set(), beam.pvalue.AsSingleton(near)
        ).with_outputs(DROPPED, THUMBS, main="docs")
        report = _near_report_of(near, name, self._radius, self._sources, applied[THUMBS])
        return {"docs": applied.docs, "dropped": applied[DROPPED], "report": report}


def _near_decisions(
    buckets,
    pipeline,
    name: str,
    radius: int,
    near: bool,
    eval_hashes: tuple[int, ...],
    exact=None,
    drop_document: bool = False,
) -> beam.PCollection:
    """The near rule's decisions, one element (:func:`_near_decided`): the
    buckets (and the evaluation images' hashes) compared, the pairs and hits
    joined in one combine (:class:`NearFound`)."""
    if eval_hashes:
        evals = pipeline | f"{name}EvalHashes" >> beam.Create(
            [
                ((band, bits % BAND_PARTS), ([""], [index], _packed([value])))
                for index, value in enumerate(eval_hashes)
                for band, bits in band_keys(value, radius)
            ]
        )
        buckets = (buckets, evals) | f"{name}AllBuckets" >> beam.Flatten()
    leave_out = {} if exact is None else {"exact": exact, "drop_document": drop_document}
    return (
        buckets
        | f"{name}Buckets" >> beam.GroupByKey()
        | f"{name}Pairs" >> beam.FlatMap(_pairs_in_bucket, radius=radius, near=near, **leave_out)
        | f"{name}Components" >> beam.CombineGlobally(NearFound())
        | f"{name}Decided" >> beam.Map(_near_decided)
    )


def _near_decided(found: tuple[list, list]) -> dict:
    """What :class:`NearFound` joined → the near rule's decisions: the entries
    by record (``near_duplicate_image``: every member of a cluster but its
    label; ``eval_contamination``: every hit), images removed by reason, the
    :data:`CLUSTERS` largest clusters (size, label, the first
    :data:`CLUSTER_MEMBERS` members), how many there
    are, and the members whose thumbnails the report shows. All of it comes
    from the near pairs and hits, which the combine already holds in one place.

    >>> a, b, c, d = ("a", 0), ("b", 1), ("c", 0), ("d", 0)
    >>> decided = _near_decided(([(a, a), (b, a), (c, c), (d, c)], [("e", 2)]))
    >>> decided["entries"]
    {'b': [(1, 'near_duplicate_image')], 'd': [(0, 'near_duplicate_image')], \
'e': [(2, 'eval_contamination')]}
    >>> decided["removed"], decided["clusters"], decided["largest"][0]
    ({'eval_contamination': 1, 'near_duplicate_image': 2}, 2, (2, ('a', 0), [('a', 0), ('b', 1)]))
    """
    labels, hits = found
    entries: dict = {}
    for record, position, why in rules.near_removals(labels):
        entries.setdefault(record, []).append((position, why))
    for record, position in hits:
        entries.setdefault(record, []).append((position, rules.EVAL_CONTAMINATION))
    members: dict = {}
    for node, label in labels:
        members.setdefault(label, []).append(node)
    clusters = sorted(
        ((len(nodes), label) for label, nodes in members.items()), key=lambda c: (-c[0], c[1])
    )
    # only the members a report shows: every worker holds this as a side input
    largest = [
        (n, label, sorted(members[label])[:CLUSTER_MEMBERS]) for n, label in clusters[:CLUSTERS]
    ]
    return {
        "entries": entries,
        "removed": _removed(entries.values()),
        "largest": largest,
        "clusters": len(clusters),
        "wanted": {m for _, _, nodes in largest for m in nodes},
    }


def cluster_summary(labels: beam.PCollection, name: str) -> tuple:
    """What a report shows of the clusters ``labels`` (node → its cluster's
    label) make: the :data:`CLUSTERS` largest (size, label, members), how
    many there are, and the members whose thumbnails it wants."""
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
    return largest, sizes, wanted


def _near_report_of(near, name: str, radius: int, sources, thumbs, exact=None) -> beam.PCollection:
    """The report, made from the one element of ``near`` (:func:`_near_decided`)."""
    return near | f"{name}Report" >> beam.Map(
        _near_report,
        radius=radius,
        sources=sources,
        thumbs=beam.pvalue.AsList(thumbs),
        **({} if exact is None else {"exact": exact}),
    )


class PostFetchImages(beam.PTransform):
    """The exact rules by bytes (``exact_name``) and the near rule
    (``near_name``) in one pass over the batches: each batch is looked at,
    written to the stash and read back once, not once per rule, and the
    removals of both are applied together. The decisions are those of the two
    steps one after the other: the images the exact rules remove are left out
    of the near rule's buckets (:func:`_pairs_in_bucket`), so they join no
    cluster, and the near report gives positions as they are after the exact
    removals. Returns ``{"docs", "dropped", "report", "dropped_near",
    "report_near"}``."""

    def __init__(
        self,
        exact_name: str,
        near_name: str,
        dedup: bool,
        max_repeats,
        radius: int,
        near: bool,
        drop_document: bool,
        eval_hashes: tuple[int, ...] = (),
        sources: tuple[dict, ...] = (),
        output: str | None = None,
    ):
        super().__init__()
        self._exact_name, self._near_name = exact_name, near_name
        self._dedup, self._max_repeats = dedup, max_repeats
        self._radius, self._near = radius, near
        self._drop_document = drop_document
        self._eval_hashes, self._sources = tuple(eval_hashes), tuple(sources)
        self._output = output

    def expand(self, batches):
        pipeline = batches.pipeline
        exact_name, near_name = self._exact_name, self._near_name
        looks = {
            FOUND: _occurrences_of("bytes"),
            BUCKETS: functools.partial(_buckets, radius=self._radius),
        }
        looked = batches | f"{exact_name}Look" >> beam.ParDo(
            Look(looks, self._output)
        ).with_outputs(FOUND, BUCKETS, main="batches")
        exact = _exact_decisions(looked[FOUND], exact_name, "bytes", self._dedup, self._max_repeats)
        records = records_of(exact.entries, exact_name)
        removed = beam.pvalue.AsSingleton(records)
        near = _near_decisions(
            looked[BUCKETS],
            pipeline,
            near_name,
            self._radius,
            self._near,
            self._eval_hashes,
            exact=removed,
            drop_document=self._drop_document,
        )
        applied = looked.batches | f"{exact_name}Apply" >> beam.ParDo(
            ApplyRemovals(exact_name, self._drop_document, near_stage=near_name),
            removed,
            beam.pvalue.AsSingleton(exact.wanted),
            beam.pvalue.AsSingleton(near),
        ).with_outputs(DROPPED, DROPPED_NEAR, THUMBS, main="docs")
        thumbs = applied[THUMBS]
        return {
            "docs": applied.docs,
            "dropped": applied[DROPPED],
            "report": _exact_report_of(exact, records, exact_name, "bytes", thumbs),
            "dropped_near": applied[DROPPED_NEAR],
            "report_near": _near_report_of(
                near, near_name, self._radius, self._sources, thumbs, exact=removed
            ),
        }


def _reverse_node(node: tuple[str, int]) -> tuple:
    return _reverse(node[0]) + (-node[1],)


class Components(beam.CombineFn):
    """Near pairs into clusters, every node with its cluster's label: a
    union-find (:func:`corpora.dedup.lsh.union`) whose roots are each
    cluster's smallest node, so the result does not depend on the order pairs
    arrive or how the runner splits them. It holds the near pairs only (a
    small share of the images), never the hashes."""

    def create_accumulator(self) -> dict:
        return {}

    def add_input(self, parent: dict, edge) -> dict:
        union(parent, edge[0], edge[1])
        return parent

    def merge_accumulators(self, accumulators) -> dict:
        return merge(accumulators)

    def extract_output(self, parent: dict) -> list:
        return sorted((node, find(parent, node)) for node in parent)


class NearFound(beam.CombineFn):
    """What :func:`_pairs_in_bucket` finds, joined: its near pairs into
    clusters (:class:`Components`' union-find) and its hits on evaluation
    images as a set (an image in several buckets of one evaluation image is
    hit once). Returns ``(labels, hits)``, both sorted; it holds the near
    pairs and hits only, a small share of the images."""

    _clusters = Components()

    def create_accumulator(self) -> tuple[dict, set]:
        return self._clusters.create_accumulator(), set()

    def add_input(self, accumulator, found) -> tuple[dict, set]:
        parent, hits = accumulator
        if found[0] == "edge":
            self._clusters.add_input(parent, found[1])
        else:
            hits.add(found[1])
        return accumulator

    def merge_accumulators(self, accumulators) -> tuple[dict, set]:
        parents, hits = [], set()
        for parent, more in accumulators:
            parents.append(parent)
            hits |= more
        return self._clusters.merge_accumulators(parents), hits

    def extract_output(self, accumulator) -> tuple[list, list]:
        parent, hits = accumulator
        return self._clusters.extract_output(parent), sorted(hits)


def _near_report(near: dict, radius, sources, thumbs, exact=None) -> dict:
    """``near``: the rule's decisions (:func:`_near_decided`). ``exact``: the
    exact rules' entries by record, when they were applied in the same pass:
    positions are then given as they are after those removals."""
    largest = near["largest"]
    thumbnails = dict(thumbs)

    def where(node) -> tuple[str, int]:
        return node if exact is None else _after_exact(node, exact)

    shown = []
    for size, label, members in sorted(largest, key=lambda c: (-c[0], c[1])):
        kept = where(label)
        shown.append(
            {
                "size": size,
                "kept": {"record_id": kept[0], "position": kept[1]},
                "members": [
                    {
                        "record_id": m[0],
                        "position": where(m)[1],
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
        "removed": near["removed"],
        "clusters": near["clusters"],
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


NEAR_STAGE = "near_duplicate_images"
_DEFERRED = "duplicate_images_deferred"  # build.outputs: the exact step left to the near one


def image_bytes_step(stage, batches, build):
    """After the fetch: one record per image body, by sha256, and the repeats
    of a body under several URLs. When the near stage comes next, both run in
    one pass (:class:`PostFetchImages`, in :func:`near_images_step`)."""
    names = build.names
    if stage.name in names[:-1] and names[names.index(stage.name) + 1] == NEAR_STAGE:
        build.outputs[_DEFERRED] = stage
        return batches
    return _exact_step(stage, batches, build, "bytes")


def near_images_step(stage, batches, build):
    """After the fetch and the exact steps: near duplicates (``--dedup-images
    near``) and evaluation images (``--decontaminate`` folders and parquets)."""
    from corpora.dedup.evaluation import read_eval_images

    settings = rules.image_dedup(build.settings)
    sources = [read_eval_images(p) for p in settings.decontaminate]  # the image sources only
    evaluation = {  # the near rule's evaluation images, and where it stashes batches
        "eval_hashes": tuple(h for source in sources for h in source.hashes),
        "sources": tuple(source.summary() for source in sources),
        "output": build.settings.output,
    }
    exact_stage = build.outputs.pop(_DEFERRED, None)
    if exact_stage is not None:
        both = batches | stage.name >> PostFetchImages(
            exact_stage.name,
            stage.name,
            settings.exact,
            settings.max_repeats,
            settings.distance,
            settings.near,
            build.spec.drop_on_image_failure,
            **evaluation,
        )
        build.dropped(exact_stage.name, both["dropped"])
        build.report(exact_stage.name, both["report"])
        build.dropped(stage.name, both["dropped_near"])
        build.report(stage.name, both["report_near"])
        return both["docs"]
    found = batches | stage.name >> NearImages(
        stage.name,
        settings.distance,
        settings.near,
        build.spec.drop_on_image_failure,
        **evaluation,
    )
    build.dropped(stage.name, found["dropped"])
    build.report(stage.name, found["report"])
    return found["docs"]
