"""Text dedup in Beam: exact groups, MinHash LSH banding, connected components.

    batches ─► keys (exact hash; 14 band keys, near) ─► GroupByKey per key
      ─► edges (smallest id ─ each other id of a group) ─► components (union-find,
      combined) ─► {duplicate id: reason} ─► the batches less the duplicates

No step holds every signature: a record's signature is computed, cut into band
keys and dropped on the worker that holds the record; only (key, id) pairs
cross, and only groups of two or more ids become edges. The pairs cross in
:data:`PARTS` partitions of the keys (one element per partition a batch
fills, grouped by partition, then by key inside it), since Beam's cost is
per element: a record's 15 keys would be 15 elements. The components are
found by a combine over the edges (a union-find per bundle, merged), so what
one place holds is proportional to the duplicates, not to the records; the
duplicates' ids reach every worker as one side input. The copy kept is the
record with the smallest id of its component (a string order), whatever the
runner, the worker count or the order the records arrive in.

(The image rules band perceptual hashes with their own code,
``corpora/dedup/lsh.py``; the two share the idea, not the code.)
"""

from __future__ import annotations

import zlib
from typing import Iterable, Iterator

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from corpora.dedup.index import (
    INDEX,
    exclude_seen_stage,
    index_rows,
    index_table,
    seen_builds,
    seen_report,
    write_merged_index,
)
from corpora.dedup.lsh import find, merge, union
from corpora.dedup.minhash import MinHashSettings, batch_band_keys
from corpora.dedup.sources import decontamination_report, eval_contamination, text_paths
from corpora.dedup.text import (
    DEDUP_TEXT,
    DEDUP_TEXT_MODES,
    DUPLICATE_TEXT,
    EXACT,
    NEAR,
    NEAR_DUPLICATE_TEXT,
    record_text,
    text_hashes,
)
from corpora.record import Document, Drop
from corpora.stages import Stage
from corpora.store.stash import INDEX_PARTS
from pipelines import storage
from pipelines.stages import ApplyStage, Steps, label
from pipelines.store import StashReader, stash_files, stashed
from pipelines.transforms import DROPPED, route_batch

_EXACT_KEYS, _BAND_KEYS = "exact_keys", "band_keys"


PARTS = 64  # the keys' partitions (module doc)


def part_of(key: bytes | str) -> int:
    """The partition of a key (an exact hash in hex, or a band key): the same
    in every process (crc32, not Python's salted ``hash``).

    >>> part_of("00ff"), part_of(b"ab")
    (33, 45)
    """
    return zlib.crc32(key if isinstance(key, bytes) else key.encode("utf-8")) % PARTS


class TextKeys(beam.DoFn):
    """A batch → its (exact hash, id) pairs and, for ``near``, its (band key,
    id) pairs of each record with text, as ``(partition, [(key, id), …])``:
    one element per partition the batch fills, not one per key (Beam's cost
    is per element, and ``near`` makes 15 keys a record)."""

    def __init__(self, mode: str, minhash: MinHashSettings):
        self._mode, self._minhash = mode, minhash

    def process(self, batch: list[Document]) -> Iterator:
        texts, ids = [], []
        for document in batch:
            text = record_text(document)
            if not text.strip():
                continue
            texts.append(text)
            ids.append(document.id)
        exact = list(zip(text_hashes(texts), ids))  # the batch's texts hashed together
        bands = []
        if self._mode == NEAR:  # the batch's signatures together (captions are short)
            for record, keys in zip(ids, batch_band_keys(texts, self._minhash)):
                bands.extend((key, record) for key in keys)
        for part in partitioned(exact):
            yield beam.pvalue.TaggedOutput(_EXACT_KEYS, part)
        for part in partitioned(bands):
            yield beam.pvalue.TaggedOutput(_BAND_KEYS, part)


def partitioned(pairs: Iterable[tuple]) -> list[tuple[int, list]]:
    """``(key, value)`` pairs as ``(partition, [pairs])`` (:func:`part_of` of
    each key), partitions in order: one Beam element per partition, not per key.

    >>> partitioned([("00ff", 1), (b"ab", 2), ("00ff", 3)])
    [(33, [('00ff', 1), ('00ff', 3)]), (45, [(b'ab', 2)])]
    """
    parts: dict[int, list] = {}
    for pair in pairs:
        parts.setdefault(part_of(pair[0]), []).append(pair)
    return sorted(parts.items())


def key_groups(part: tuple[int, Iterable[list]]) -> list[tuple]:
    """A partition's pairs from every batch (:func:`partitioned`, grouped by
    partition) → ``(key, [values])`` per key, keys in order.

    >>> key_groups((3, [[("k", "c"), ("j", "d")], [("k", "a")]]))
    [('j', ['d']), ('k', ['c', 'a'])]
    """
    groups: dict = {}
    for pairs in part[1]:
        for key, value in pairs:
            groups.setdefault(key, []).append(value)
    return sorted(groups.items())


def group_edges(group: tuple[bytes | str, list[str]]) -> Iterator[tuple[str, str]]:
    """A group of ids under one key → an edge from its smallest id to each other.

    >>> list(group_edges(("k", ["c", "a", "b", "a"])))
    [('a', 'b'), ('a', 'c')]
    """
    ids = sorted(set(group[1]))
    return ((ids[0], other) for other in ids[1:])


def partition_edges(part: tuple[int, Iterable[list]]) -> Iterator[tuple[str, str]]:
    """A partition's pairs from every batch → the edges of each key's group.

    >>> list(partition_edges((3, [[("k", "c"), ("j", "d")], [("k", "a")]])))
    [('a', 'c')]
    """
    for group in key_groups(part):
        if len(group[1]) > 1:
            yield from group_edges(group)


class Components(beam.CombineFn):
    """Edges → {member: the smallest id of its component}, for every member but the smallest.

    A union-find (:func:`corpora.dedup.lsh.union`) whose root is always the
    smallest id, so merging accumulators in any order gives the same answer:

    >>> fn = Components()
    >>> one = fn.add_input(fn.add_input(fn.create_accumulator(), ("b", "c")), ("d", "e"))
    >>> two = fn.add_input(fn.create_accumulator(), ("a", "e"))
    >>> sorted(fn.extract_output(fn.merge_accumulators([two, one])).items())
    [('c', 'b'), ('d', 'a'), ('e', 'a')]
    """

    def create_accumulator(self) -> dict[str, str]:
        return {}

    def add_input(self, parent: dict[str, str], edge: tuple[str, str]) -> dict[str, str]:
        union(parent, *edge)
        return parent

    def merge_accumulators(self, accumulators) -> dict[str, str]:
        return merge(accumulators)

    def extract_output(self, parent: dict[str, str]) -> dict[str, str]:
        roots = {child: find(parent, child) for child in parent}
        return {child: root for child, root in sorted(roots.items()) if child != root}


def _duplicates(exact: dict[str, str], near: dict[str, str]) -> dict[str, tuple[str, str]]:
    """{id: (reason, kept id)}: an exact copy is ``duplicate_text`` even when near dedup
    also found it; the kept id is its component's smallest."""
    found = {member: (NEAR_DUPLICATE_TEXT, root) for member, root in near.items()}
    for member, kept in exact.items():
        found[member] = (DUPLICATE_TEXT, near.get(member, kept))
    return found


class RemoveDuplicates(beam.DoFn):
    """A batch less the records found duplicated; each one a drop with its reason."""

    def __init__(self, stage: str):
        self._stage = stage

    def process(self, batch: list[Document], duplicates: dict) -> Iterator:
        yield from route_batch((_judge(document, duplicates) for document in batch), self._stage)


def _judge(document: Document, duplicates: dict) -> Document | Drop:
    found = duplicates.get(document.id)
    if found is None:
        return document
    reason, kept = found
    return Drop(reason, document.id, detail=f"same text as {kept}")


class DedupText(beam.PTransform):
    """Batches → ``kept`` (the batches less duplicates), ``dropped`` and ``summary``
    (one dict: how many of each reason, for the manifest's stage report)."""

    def __init__(self, mode: str, minhash: MinHashSettings = MinHashSettings(), stage="dedup_text"):
        super().__init__()
        if mode not in (EXACT, NEAR):
            raise ValueError(f"--dedup-text must be one of {DEDUP_TEXT_MODES}, got {mode!r}")
        self._mode, self._minhash, self._stage = mode, minhash, stage

    def expand(self, batches: beam.PCollection) -> beam.pvalue.PValue:
        name = self._stage
        keys = batches | f"{name}Keys" >> beam.ParDo(
            TextKeys(self._mode, self._minhash)
        ).with_outputs(_EXACT_KEYS, _BAND_KEYS)
        exact = (
            keys[_EXACT_KEYS]
            | f"{name}GroupExact" >> beam.GroupByKey()
            | f"{name}ExactEdges" >> beam.FlatMap(partition_edges)
            | f"{name}ExactComponents" >> beam.CombineGlobally(Components())
        )
        if self._mode == NEAR:
            near = (
                keys[_BAND_KEYS]
                | f"{name}GroupBands" >> beam.GroupByKey()
                | f"{name}BandEdges" >> beam.FlatMap(partition_edges)
                | f"{name}NearComponents" >> beam.CombineGlobally(Components())
            )
        else:
            near = batches.pipeline | f"{name}NoNear" >> beam.Create([{}])
        duplicates = exact | f"{name}Duplicates" >> beam.Map(
            lambda e, n: _duplicates(e, n), n=beam.pvalue.AsSingleton(near)
        )
        judged = batches | f"{name}Remove" >> beam.ParDo(
            RemoveDuplicates(name), beam.pvalue.AsSingleton(duplicates)
        ).with_outputs("dropped", main="kept")
        summary = duplicates | f"{name}Summary" >> beam.Map(self._summary)
        return {"kept": judged.kept, "dropped": judged.dropped, "summary": summary}

    def _summary(self, duplicates: dict) -> dict:
        counts = {DUPLICATE_TEXT: 0, NEAR_DUPLICATE_TEXT: 0}
        for reason, _ in duplicates.values():
            counts[reason] += 1
        report = {"mode": self._mode, "removed": counts}
        if self._mode == NEAR:
            report["minhash"] = {
                "ngram": self._minhash.ngram,
                "bands": self._minhash.bands,
                "rows": self._minhash.rows,
                "seed": self._minhash.seed,
            }
        return report


# ---------------------------------------------------------------- the stages' Beam wrappers


def dedup_text_step(stage: Stage, batches, build: Steps):
    """``dedup_text``: the batches less their duplicate texts (module doc)."""
    mode = build.settings.stage_options[DEDUP_TEXT.name]
    result = batches | label(stage) >> DedupText(mode, MinHashSettings(), label(stage))
    build.dropped(stage.name, result["dropped"])
    build.report(stage.name, result["summary"])
    return result["kept"]


def decontaminate_text_step(stage: Stage, batches, build: Steps):
    """``decontaminate_text``: each record's text against the evaluation texts
    (read once per worker process); the report names every source and its sha256."""
    report = decontamination_report(text_paths(build.settings))  # here: a bad file fails first
    build.report(stage.name, build.pipeline | f"{label(stage)}Report" >> beam.Create([report]))
    return _per_record(stage, batches, build, eval_contamination)


def exclude_seen_step(stage: Stage, batches, build: Steps):
    """``exclude_seen`` (before the fetch: texts and image URLs) and
    ``exclude_seen_images`` (after it: the same, and the images' bytes): the
    batches less what the ``--exclude-seen`` builds kept. An image taken out of
    a kept document is counted by the pack stage (``meta["images_removed"]``)."""
    if stage.options:  # the first of the two reports the builds read
        report = seen_report(seen_builds(build.settings))
        build.report(stage.name, build.pipeline | f"{label(stage)}Report" >> beam.Create([report]))
    return _per_record(stage, batches, build, exclude_seen_stage)


def _per_record(stage: Stage, batches, build: Steps, core):
    out = batches | label(stage) >> beam.ParDo(
        ApplyStage(core, build.settings, stage.name)
    ).with_outputs(DROPPED, main="docs")
    build.dropped(stage.name, out[DROPPED])
    return out.docs


def index_step(stage: Stage, batches, build: Steps):
    """``dedup_index``: ``dedup_index.parquet`` beside the manifest, from the
    records that reach the pack stage; the batches pass unchanged. Its report:
    how many rows of each kind."""
    name = label(stage)
    # one Arrow table of distinct rows per batch, written to the stash: a build's
    # index is a reference per batch for the runner to hold, and the writer merges
    # the tables a range of rows at a time (write_merged_index), so its memory
    # stays flat (a 2,000,000-document build's rows as Python tuples: 400 MB in
    # the writer, and 85 MB pickled in a local build's launcher)
    rows = batches | f"{name}Rows" >> beam.ParDo(_IndexPart(build.settings.output))
    path = FileSystems.join(build.settings.output, INDEX)
    written = (
        build.pipeline
        | f"{name}File" >> beam.Create([path])
        | f"{name}Write" >> beam.Map(_write_index, rows=beam.pvalue.AsList(rows))
    )
    build.report(stage.name, written)
    return batches


class _IndexPart(beam.DoFn):
    """A batch → the stash reference of its index rows (:func:`index_table`)."""

    def __init__(self, output: str):
        self._output = output
        self._files = None

    def setup(self) -> None:
        self._files = stash_files(self._output, INDEX_PARTS)

    def process(self, batch: list[Document]) -> Iterator:
        yield stashed(self._files, index_table(index_rows(batch)))


def _write_index(path: str, rows) -> dict:
    reader = StashReader()
    try:
        with storage.create_atomically(path) as stream:
            counts = write_merged_index(stream, (reader.get(part) for part in rows))
    finally:
        reader.close()
    return {"path": INDEX, "rows": counts}
