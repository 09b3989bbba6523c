"""Packing in Beam: tokenized documents → shards, references through the shuffles.

    tokenized documents ─► batches ─► stash (plan each document; write it, its
      images as references) ─► count ─► route plans to packing groups
      ─► per group: plan, cut, write the sequences to the stash
      ─► number sequences globally ─► group by shard ─► write shards

Every step calls the core function :mod:`corpora.pack_groups` names for it,
so the bytes are those of :func:`corpora.pack.pack` on the same documents.
What crosses between workers after the stash is small: each document's plan
and where it is, then each sequence's place and where it is. The documents
and the sequences are written once, to ``{output}/.corpora/documents`` and
``.corpora/sequences`` (:class:`corpora.store.stash.BlobWriter`), and read
back by the step that needs them: the packer reads a group's documents, the
shard writer its sequences. A local build's memory then grows with the
number of documents by about a plan's size, not by their tokens and images,
and a distributed runner shuffles references rather than the corpus; the
elements are batches of documents, so a step's cost per document is small.

Where fsspec cannot reach the output (``gs://`` without gcsfs, ``s3://``
without s3fs), the documents and sequences travel inside the elements
instead; the shards are the same.
"""

from __future__ import annotations

import collections
from typing import Any, Iterable, Iterator

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from corpora import pack, shards, stats
from corpora.pack_groups import group_of, group_offsets, plan_group
from corpora.settings import BuildSettings
from corpora.store.files import Files, reachable
from corpora.store.outcomes import ImageRef
from corpora.store.reader import ImageReader
from corpora.store.stash import (
    DOCUMENTS,
    SEQUENCES,
    BlobWriter,
    read_blob,
    stash_images,
    stash_writer,
    unstash_piece,
)
from pipelines import resume, storage
from pipelines.store import stash_root
from pipelines.transforms import COUNTS, DROPPED, KEPT, NAMESPACE, SEQUENCE_STATS, _route

# Documents per element after the stash: large enough that Beam's cost per
# element is small beside the documents', small enough to spread a build of a
# few thousand documents over every worker.
BATCH_MIN, BATCH_MAX = 64, 1024


def _stash_files(output: str, folder: str) -> Files | None:
    """The stash folder ``folder`` of the build at ``output``; ``None`` where
    fsspec cannot reach it here (the values then travel in the elements)."""
    root = output.rstrip("/") + "/" + folder
    return Files(root) if reachable(root) is None else None


class _Reader:
    """Values by reference, or the value itself where nothing was stashed."""

    def __init__(self):
        self._images = ImageReader()

    def get(self, value: Any) -> Any:
        return read_blob(value, self._images) if isinstance(value, ImageRef) else value

    def piece(self, piece: pack.Piece) -> pack.Piece:
        return unstash_piece(piece, self._images)

    def close(self) -> None:
        self._images.close()


class StashDocuments(beam.DoFn):
    """A batch of tokenized documents → one list of ``(plan, where)``: each
    document's :class:`~corpora.pack.DocumentPlan` (its key taken while the
    image bytes are there) and a reference to the document written to the
    stash with its images as references (:mod:`corpora.store.stash`)."""

    def __init__(self, output: str, seq_len: int):
        self._output = output
        self._seq_len = seq_len
        self._documents: Files | None = None
        self._images: Files | None = None

    def setup(self) -> None:
        self._documents = _stash_files(self._output, DOCUMENTS)
        if self._documents is not None:
            self._images = Files(stash_root(self._output))

    def process(self, batch: list) -> Iterator[list[tuple[pack.DocumentPlan, Any]]]:
        plans = [pack.plan_pieces(doc, self._seq_len) for doc in batch]
        if self._documents is None:
            yield list(zip(plans, batch))
            return
        blobs = BlobWriter(self._documents)
        if any(image.data is not None for doc in batch for image in doc.images):
            with stash_writer(self._images) as images:
                batch = [stash_images(doc, images) for doc in batch]
        where = [blobs.put(doc) for doc in batch]
        blobs.flush()  # written before the references leave the bundle
        yield list(zip(plans, where))


def route(
    batch: list[tuple[pack.DocumentPlan, Any]], documents: int, pack_groups: int | None
) -> Iterator[tuple[int, list[tuple[pack.DocumentPlan, Any]]]]:
    """A batch's entries by packing group (:func:`corpora.pack_groups.group_of`)."""
    by_group = collections.defaultdict(list)
    for entry in batch:
        by_group[group_of(entry[0].key, documents, pack_groups)].append(entry)
    yield from by_group.items()


class PackGroup(beam.DoFn):
    """Pack one group (:func:`corpora.pack_groups.plan_group` on the plans,
    then :func:`corpora.pack.cut_piece` on the documents read back) and write
    its sequences, as pieces, to the stash.

    Emits ``(group, index, where)`` per sequence; on ``counts`` ``(group,
    sequences)``; on ``kept`` the number of documents packed; empty documents
    go to ``dropped``.
    """

    def __init__(self, settings: BuildSettings):
        self._settings = settings
        self._sequences: Files | None = None
        self._reader: _Reader | None = None

    def setup(self) -> None:
        self._sequences = _stash_files(self._settings.output, SEQUENCES)
        self._reader = _Reader()

    def teardown(self) -> None:
        if self._reader is not None:
            self._reader.close()

    def process(self, element: tuple[int, Iterable[list]]) -> Iterator:
        assert self._reader is not None
        group, batches = element
        plans, where, uses = [], {}, collections.Counter()
        for batch in batches:
            for plan, place in batch:
                plans.append(plan)  # a repeated document is packed again, as it was read
                where[plan.key] = place  # documents sharing a key are byte-identical
                uses[plan.key] += len(plan.pieces)
        planned = plan_group(plans, self._settings.seq_len, self._settings.pack)
        for drop in planned.dropped:
            yield _route(drop, "pack")
        writer = BlobWriter(self._sequences) if self._sequences is not None else None
        placed, documents = [], _Documents(where, uses, self._reader)
        for index, sequence in enumerate(planned.sequences):
            pieces = [pack.cut_piece(documents.get(ref.key), ref) for ref in sequence]
            placed.append((group, index, writer.put(pieces) if writer is not None else pieces))
        if writer is not None:
            writer.flush()  # written before the references leave the bundle
        yield from placed
        Metrics.counter(NAMESPACE, "sequences").inc(len(placed))
        yield beam.pvalue.TaggedOutput(COUNTS, (group, len(placed)))
        yield beam.pvalue.TaggedOutput(KEPT, planned.kept)


class _Documents:
    """A group's documents by key, read back on first use; a document cut
    into several pieces stays in memory until its last piece is cut."""

    def __init__(self, where: dict[str, Any], uses: dict[str, int], reader: _Reader):
        self._where = where
        self._uses = uses
        self._reader = reader
        self._held: dict[str, tuple[Any, int]] = {}

    def get(self, key: str):
        held = self._held.get(key)
        if held is None:
            held = (self._reader.get(self._where[key]), self._uses[key])
        doc, left = held
        if left > 1:
            self._held[key] = (doc, left - 1)
        else:
            self._held.pop(key, None)
        return doc


class PlaceSequences(beam.DoFn):
    """Number each sequence globally (groups in order) and pick its shard.

    Emits ``(shard, (global_index, where))``.
    """

    def __init__(self, samples_per_shard: int):
        self._samples_per_shard = samples_per_shard
        self._offsets: dict[int, int] | None = None

    def process(self, element: tuple[int, int, Any], counts: dict[int, int]) -> Iterator:
        if self._offsets is None:
            self._offsets = group_offsets(counts)
        group, index, where = element
        global_index = self._offsets[group] + index
        yield global_index // self._samples_per_shard, (global_index, where)


class WriteShard(beam.DoFn):
    """Read one shard's sequences back, lay them out, write the shard whole
    (:func:`pipelines.storage.create_atomically`) and mark it complete; a shard
    that a previous attempt completed with exactly these bytes is left as it is.

    With ``stat_ids``, each sequence's statistics values
    (:func:`corpora.stats.sequence_values`) go to the ``sequence_stats``
    output, so the build's statistics need no second pass over the shards.
    """

    def __init__(
        self, settings: BuildSettings, pad_id: int, stat_ids: stats.TokenIds | None = None
    ):
        self._settings = settings
        self._pad_id = pad_id
        self._stat_ids = stat_ids
        self._reader: _Reader | None = None

    def setup(self) -> None:
        self._reader = _Reader()

    def teardown(self) -> None:
        if self._reader is not None:
            self._reader.close()

    def process(self, element: tuple[int, Iterable[tuple[int, Any]]]) -> Iterator:
        shard_index, sequences = element
        reader = self._reader
        assert reader is not None
        items = [
            (number, slot, reader.piece(piece))
            for number, where in sequences
            for slot, piece in enumerate(reader.get(where))
        ]
        settings = self._settings
        corpus = settings.corpus
        name = shards.shard_name(corpus, shard_index)
        samples = [
            (shards.sample_key(corpus, shard_index, number % settings.samples_per_shard), sequence)
            for number, sequence in pack.assemble_sequences(items, settings.seq_len, self._pad_id)
        ]
        info = resume.completed_shard(settings.output, name, samples)
        if info is not None:  # a previous attempt wrote exactly this shard: leave it
            Metrics.counter(NAMESPACE, "shards.resumed").inc()
        else:
            with storage.create_atomically(FileSystems.join(settings.output, name)) as stream:
                info = shards.write_shard(stream, samples)
            resume.write_marker(settings.output, name, info)
            Metrics.counter(NAMESPACE, "shards").inc()
            Metrics.counter(NAMESPACE, "bytes").inc(info["bytes"])
        yield {"index": shard_index, "path": name, **info}
        if self._stat_ids is not None:
            for _, sequence in samples:
                yield beam.pvalue.TaggedOutput(
                    SEQUENCE_STATS,
                    stats.sequence_values(
                        sequence.input_ids, sequence.segment_ids, sequence.documents, self._stat_ids
                    ),
                )


class PackSequences(beam.PTransform):
    """Tokenized documents → shard infos, deterministically, carrying
    references through the shuffles (the module doc).

    The result has ``shards`` (one info dict per shard written), ``kept``
    (documents packed, per group), ``dropped`` and ``sequence_stats`` (one
    :class:`corpora.stats.SequenceValues` per sequence, when ``stat_ids`` is given).
    """

    def __init__(
        self, settings: BuildSettings, pad_id: int, stat_ids: stats.TokenIds | None = None
    ):
        super().__init__()
        self._settings = settings
        self._pad_id = pad_id
        self._stat_ids = stat_ids

    def expand(self, tokenized):
        settings = self._settings
        stashed = (
            tokenized
            | "Batch" >> beam.BatchElements(min_batch_size=BATCH_MIN, max_batch_size=BATCH_MAX)
            | "Stash" >> beam.ParDo(StashDocuments(settings.output, settings.seq_len))
        )
        documents = stashed | "CountDocuments" >> (beam.Map(len) | beam.CombineGlobally(sum))
        packed = (
            stashed
            | "Route"
            >> beam.FlatMap(route, beam.pvalue.AsSingleton(documents), settings.pack_groups)
            | "ByGroup" >> beam.GroupByKey()
            | "Pack"
            >> beam.ParDo(PackGroup(settings)).with_outputs(COUNTS, KEPT, DROPPED, main="sequences")
        )
        written = (
            packed.sequences
            | "Place"
            >> beam.ParDo(
                PlaceSequences(settings.samples_per_shard), beam.pvalue.AsDict(packed[COUNTS])
            )
            | "ByShard" >> beam.GroupByKey()
            | "WriteShard"
            >> beam.ParDo(WriteShard(settings, self._pad_id, self._stat_ids)).with_outputs(
                SEQUENCE_STATS, main="shards"
            )
        )
        return {
            "shards": written.shards,
            "kept": packed[KEPT],
            "dropped": packed[DROPPED],
            "sequence_stats": written[SEQUENCE_STATS],
        }
