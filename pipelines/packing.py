"""Packing in Beam: tokenized documents → shards, references through the shuffles.

    batches of tokenized documents ─► stash (plan each document; write it, its
      images as references) ─► count ─► route plans to packing groups
      ─► per group: plan the sequences on the plans alone
      ─► number sequences globally ─► group by shard
      ─► per shard: read its documents back, cut, lay out, write

Every step calls the core function :mod:`corpora.tokens.pack_groups` names for it,
so the bytes are those of :func:`corpora.tokens.pack.pack` on the same documents.
What crosses between workers is small: each document's plan and where it
is, then each sequence's pieces and where their documents are. The
documents are written once, to ``{output}/.corpora/documents``
(:class:`corpora.store.stash.BlobWriter`), and read back by the shard
writer. A local build's memory then grows with the number of documents by
about a plan's size, not by their tokens and images, and a distributed
runner shuffles references rather than the corpus; the elements are batches
of documents or whole sequences, so a step's cost per document is small.

Where fsspec cannot reach the output (``gs://`` without gcsfs, ``s3://``
without s3fs), the documents travel inside the elements instead; the shards
are the same.

A text corpus (:func:`corpora.tokens.pack_groups.packs_where_tokenized`) stashes
no document: :class:`PackText` takes each batch of records as the reader made
it (a packing group) and tokenizes, plans and packs it in one step, where
it is, its statistics taken from the arrays in hand::

    batches of records ─► per batch: tokenize (one encode call), plan, pack,
      statistics; its sequences written once (one file per group)
      ─► number groups globally ─► group by shard ─► per shard: lay out, write

so only a group's reference and counts cross a shuffle, and its sequences'
ids are written and read back once, in one piece, as numpy arrays.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any, Iterable, Iterator

import apache_beam as beam
import numpy as np
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from corpora import shards
from corpora.config.settings import BuildSettings
from corpora.stats import figures as stats
from corpora.store.files import Files
from corpora.store.stash import (
    DOCUMENTS,
    SEQUENCES,
    STASH,
    BlobWriter,
    stash_images,
    stash_writer,
)
from corpora.tokens import pack
from corpora.tokens.pack_groups import (
    PackedGroup,
    group_of,
    group_offsets,
    group_sequences,
    pack_group,
    packs_where_tokenized,
    plan_group,
)
from corpora.tokens.tokenizer import Span, TokenizedDocument, Tokenizer, tokenize_batch
from pipelines import memory, resume, storage
from pipelines.stats import token_ids
from pipelines.store import StashReader, reference, stash_files
from pipelines.transforms import (
    COUNTS,
    DROPPED,
    IMAGES_REMOVED,
    KEPT,
    NAMESPACE,
    SEQUENCE_STATS,
    CountRemovedImages,
    Tokenize,
    route_result,
)

# Sequences per element leaving a packing group: enough that Beam's cost per
# element is small beside theirs, few enough that an element stays small.
SEQUENCES_PER_ELEMENT = 1_000


class StashDocuments(beam.DoFn):
    """A batch of tokenized documents → one list of ``(plan, where)``: each
    document's :class:`~corpora.tokens.pack.DocumentPlan` as a tuple (its key taken
    while the image bytes are there) and where the document is: written to
    the stash with its images as references (:mod:`corpora.store.stash`),
    the reference as a tuple; the document itself where nothing is stashed."""

    def __init__(self, output: str, seq_len: int):
        self._output = output
        self._seq_len = seq_len
        self._documents: Files | None = None
        self._images: Files | None = None

    def setup(self) -> None:
        memory.settle_gc()
        self._documents = stash_files(self._output, DOCUMENTS)
        self._images = stash_files(self._output, STASH)

    def process(self, batch: list) -> Iterator[list[tuple[pack.DocumentPlan, Any]]]:
        plans = [_compact_plan(pack.plan_pieces(doc, self._seq_len)) for doc in batch]
        if self._documents is None:
            yield list(zip(plans, batch))
            return
        blobs = BlobWriter(self._documents)
        if any(image.data is not None for doc in batch for image in doc.images):
            with stash_writer(self._images) as images:
                batch = [stash_images(doc, images) for doc in batch]
        where = [reference(blobs.put(_stored(doc))) for doc in batch]
        blobs.flush()  # written before the references leave the bundle
        yield list(zip(plans, where))


def route(
    batch: list[tuple[pack.DocumentPlan, Any]], documents: int, pack_groups: int | None
) -> Iterator[tuple[int, list[tuple[pack.DocumentPlan, Any]]]]:
    """A batch's entries by packing group (:func:`corpora.tokens.pack_groups.group_of`)."""
    by_group = collections.defaultdict(list)
    for entry in batch:
        by_group[group_of(entry[0][0], documents, pack_groups)].append(entry)
    yield from by_group.items()


# A stashed document is a tuple, its tokens as bytes: written and read back
# once each, it pickles and unpickles in a third of the dataclass's time.
def _stored(doc: TokenizedDocument) -> tuple:
    spans = tuple((s.kind, s.start, s.end, s.image_index) for s in doc.spans)
    return doc.id, doc.corpus, doc.input_ids.tobytes(), spans, doc.images, doc.provenance


def _restored(stored: tuple) -> TokenizedDocument:
    id, corpus, ids, spans, images, provenance = stored
    input_ids = np.frombuffer(ids, dtype=np.int32)
    return TokenizedDocument(
        id, corpus, input_ids, tuple(Span(*s) for s in spans), images, provenance
    )


# Between the stash and the shard writer, plans, pieces and references travel
# as plain tuples: Beam pickles every element at every crossing, and a tuple
# of strings and ints pickles several times faster than the dataclasses.
def _compact_plan(plan: pack.DocumentPlan) -> tuple[str, tuple]:
    return plan.key, tuple(p.bounds() for p in plan.pieces)


def _plan(compact: tuple[str, tuple]) -> pack.DocumentPlan:
    key, bounds = compact
    return pack.DocumentPlan(key, tuple(pack.PieceRef(key, *bound) for bound in bounds))


class PackGroup(beam.DoFn):
    """Plan one group's packing (:func:`corpora.tokens.pack_groups.plan_group`) on
    the documents' plans alone.

    Emits ``(group, first, sequences)`` per :data:`SEQUENCES_PER_ELEMENT`
    sequences, each sequence a list of ``(piece, where)``, ``where`` saying
    where the piece's document is (few elements: Beam's cost is per
    element); on ``counts`` ``(group, sequences)``; on ``kept`` the number
    of documents packed; empty documents go to ``dropped``.
    """

    def __init__(self, settings: BuildSettings):
        self._settings = settings

    def process(self, element: tuple[int, Iterable[list]]) -> Iterator:
        group, batches = element
        plans, where = [], {}
        for batch in batches:
            for plan, place in batch:
                plans.append(_plan(plan))  # a repeated document is packed again, as read
                where[plan[0]] = place  # documents sharing a key are byte-identical
        planned = plan_group(plans, self._settings.seq_len, self._settings.pack)
        for drop in planned.dropped:
            yield route_result(drop, "pack")
        count, chunk = 0, []
        for sequence in planned.sequences:
            chunk.append([((r.key, *r.bounds()), where[r.key]) for r in sequence])
            if len(chunk) == SEQUENCES_PER_ELEMENT:
                yield group, count, chunk
                count, chunk = count + len(chunk), []
        if chunk:
            yield group, count, chunk
            count += len(chunk)
        Metrics.counter(NAMESPACE, "sequences").inc(count)
        yield beam.pvalue.TaggedOutput(COUNTS, (group, count))
        yield beam.pvalue.TaggedOutput(KEPT, planned.kept)


class PlaceSequences(beam.DoFn):
    """Number each sequence globally (groups in order) and pick its shard.

    Emits ``(shard, [(global_index, pieces), ...])`` per shard a chunk of a
    group's sequences reaches.
    """

    def __init__(self, samples_per_shard: int):
        self._samples_per_shard = samples_per_shard
        self._offsets: dict[int, int] | None = None

    def process(self, element: tuple[int, int, Any], counts: dict[int, int]) -> Iterator:
        if self._offsets is None:
            self._offsets = group_offsets(counts)
        group, first, sequences = element
        by_shard: dict[int, list] = {}
        for global_index, pieces in enumerate(sequences, self._offsets[group] + first):
            by_shard.setdefault(global_index // self._samples_per_shard, []).append(
                (global_index, pieces)
            )
        yield from by_shard.items()


class _Documents:
    """The documents of one shard, each read back when its first piece is cut
    and let go after the sequence that holds its last piece, so a worker holds
    one sequence's documents (and those split across sequences), not the
    shard's: at 64 tokens an image a 2,048-token sequence holds about 25 COYO
    pairs, and a shard of 1,000 samples 25,000 documents (issue 31)."""

    def __init__(self, reader: StashReader, ordered: list[tuple[int, list]]):
        self._reader = reader
        self._read: dict[str, Any] = {}
        last: dict[str, int] = {}
        for number, pieces in ordered:
            for ref, _ in pieces:
                last[ref[0]] = number
        self._ending: dict[int, list[str]] = {}
        for key, number in last.items():
            self._ending.setdefault(number, []).append(key)

    def get(self, key: str, where: Any) -> TokenizedDocument:
        if not isinstance(where, tuple):  # it travelled in the element
            return where
        doc = self._read.get(key)
        if doc is None:
            doc = self._read[key] = _restored(self._reader.get(where))
        return doc

    def done(self, number: int) -> None:
        """Let go of the documents whose last piece is in sequence ``number``."""
        for key in self._ending.pop(number, ()):
            self._read.pop(key, None)


def _write_shard(
    settings: BuildSettings, shard_index: int, samples, values: list | None = None
) -> dict[str, Any]:
    """Write one shard whole (:func:`pipelines.storage.create_atomically`) and
    mark it complete, unless a previous attempt completed it with exactly
    these bytes (left as it is). ``samples(values)`` gives the shard's
    samples in order, filling ``values`` (when not ``None``) as it goes."""
    name = shards.shard_name(settings.corpus, shard_index)
    collected: list = [] if values is None else values
    info = resume.completed_shard(settings.output, name, samples(collected))
    if info is not None:  # a previous attempt wrote exactly this shard: leave it
        Metrics.counter(NAMESPACE, "shards.resumed").inc()
    else:
        collected.clear()  # a check that found other bytes went through them all
        with storage.create_atomically(FileSystems.join(settings.output, name)) as stream:
            info = shards.write_shard(stream, samples(collected))
        resume.write_marker(settings.output, name, info)
        Metrics.counter(NAMESPACE, "shards").inc()
        Metrics.counter(NAMESPACE, "bytes").inc(info["bytes"])
    memory.trim()  # the shard's buffers are freed: give their pages back
    return {"index": shard_index, "path": name, **info}


class WriteShard(beam.DoFn):
    """Read one shard's documents back, cut and lay out its sequences, write the shard whole
    (:func:`pipelines.storage.create_atomically`) and mark it complete; a shard
    that a previous attempt completed with exactly these bytes is left as it is.

    With ``stat_ids``, each sequence's statistics values
    (:func:`corpora.stats.figures.sequence_values`) go to the ``sequence_stats``
    output, so the build's statistics need no second pass over the shards.
    """

    def __init__(
        self, settings: BuildSettings, pad_id: int, stat_ids: stats.TokenIds | None = None
    ):
        self._settings = settings
        self._pad_id = pad_id
        self._stat_ids = stat_ids
        self._reader: StashReader | None = None

    def setup(self) -> None:
        memory.settle_gc()
        self._reader = StashReader()

    def teardown(self) -> None:
        if self._reader is not None:
            self._reader.close()

    def process(self, element: tuple[int, Iterable[list[tuple[int, Any]]]]) -> Iterator:
        shard_index, chunks = element
        ordered = sorted(
            (sequence for chunk in chunks for sequence in chunk), key=lambda sequence: sequence[0]
        )
        values: list[stats.SequenceValues] = []  # filled by the pass that checks the bytes
        yield _write_shard(
            self._settings,
            shard_index,
            lambda collected: self._samples(shard_index, ordered, collected),
            values,
        )
        for value in values:
            yield beam.pvalue.TaggedOutput(SEQUENCE_STATS, value)

    def _samples(
        self,
        shard_index: int,
        ordered: list[tuple[int, list]],
        values: list[stats.SequenceValues] | None = None,
    ) -> Iterator[tuple[str, pack.PackedSequence]]:
        """The shard's samples one at a time: only one sequence's images are
        in memory, whatever the shard's size (``values`` collects each
        sequence's statistics values as it goes)."""
        assert self._reader is not None
        settings, documents = self._settings, _Documents(self._reader, ordered)
        for number, pieces in ordered:
            cut = [
                self._reader.piece(
                    pack.cut_piece(documents.get(ref[0], where), pack.PieceRef(*ref))
                )
                for ref, where in pieces
            ]
            documents.done(number)
            sequence = pack.assemble(cut, settings.seq_len, self._pad_id)
            if values is not None and self._stat_ids is not None:
                values.append(self._values(sequence))
            key = shards.sample_key(
                settings.corpus, shard_index, number % settings.samples_per_shard
            )
            yield key, sequence

    def _values(self, sequence: pack.PackedSequence) -> stats.SequenceValues:
        assert self._stat_ids is not None
        return stats.sequence_values(
            sequence.input_ids, sequence.segment_ids, sequence.documents, self._stat_ids
        )


class PackSequences(beam.PTransform):
    """Batches (lists) of tokenized documents → shard infos, deterministically,
    carrying references through the shuffles (the module doc).

    The result has ``shards`` (one info dict per shard written), ``kept``
    (documents packed, per group), ``dropped`` and ``sequence_stats`` (one
    :class:`corpora.stats.figures.SequenceValues` per sequence, when ``stat_ids`` is given).
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
        stashed = tokenized | "Stash" >> beam.ParDo(
            StashDocuments(settings.output, settings.seq_len)
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


class PackTextGroup(beam.DoFn):
    """A text build's batch of records (one packing group) → tokenized in one
    encode call, planned and packed (:func:`corpora.tokens.pack_groups.pack_group`).

    Emits ``(order, (sequences, where))``, ``where`` being where the group's
    :class:`~corpora.tokens.pack_groups.PackedGroup` is: written once to
    ``{output}/.corpora/sequences``, or the group itself where that cannot be
    reached; on ``counts`` ``(order, sequences)``; on ``kept`` the documents
    packed; on ``sequence_stats`` the group's statistics, one
    :class:`~corpora.stats.figures.StatsAccumulator` (with ``stat_ids``);
    empty documents go to ``dropped``.
    """

    def __init__(
        self, settings: BuildSettings, tokenizer: Tokenizer, stat_ids: stats.TokenIds | None = None
    ):
        self._settings = settings
        self._tokenizer = tokenizer
        self._stat_ids = stat_ids
        self._files: Files | None = None

    def setup(self) -> None:
        memory.settle_gc()
        self._files = stash_files(self._settings.output, SEQUENCES)

    def process(self, batch: list) -> Iterator:
        settings = self._settings
        group = pack_group(tokenize_batch(batch, self._tokenizer), settings.seq_len, settings.pack)
        for drop in group.dropped:
            yield route_result(drop, "pack")
        if self._stat_ids is not None:
            accumulator = stats.StatsAccumulator().add_group(
                group.tokens,
                group.lengths,
                group.counts,
                group.entries,
                settings.seq_len,
                self._stat_ids,
            )
            yield beam.pvalue.TaggedOutput(SEQUENCE_STATS, accumulator)
        Metrics.counter(NAMESPACE, "sequences").inc(group.sequences)
        yield beam.pvalue.TaggedOutput(KEPT, group.kept)
        yield beam.pvalue.TaggedOutput(COUNTS, (group.order, group.sequences))
        if not group.sequences:
            return
        where: Any = dataclasses.replace(group, dropped=())
        if self._files is not None:
            blobs = BlobWriter(self._files)
            ref = blobs.put(
                (group.order, _narrow(group.tokens), group.lengths, group.counts, group.entries)
            )
            blobs.flush()  # written before the reference leaves the bundle
            where = reference(ref)
        yield group.order, (group.sequences, where)


def _narrow(tokens: np.ndarray) -> np.ndarray:
    """A group's ids as uint16 where they fit (a vocabulary of up to 65,536,
    SimVLM's 32k included): half the bytes to stash, hash and read back; the
    shard writer lays them out into int32 arrays either way."""
    if tokens.size and int(tokens.min()) >= 0 and int(tokens.max()) < 2**16:
        return tokens.astype(np.uint16)
    return tokens


class PlaceGroups(beam.DoFn):
    """Number each group's sequences globally (groups in ``order``) and pick
    their shards: ``(shard, (first, local_first, count, where))`` per shard
    a group's sequences reach. Groups sharing an order hold the same
    documents: they take consecutive places, either first."""

    def __init__(self, samples_per_shard: int):
        self._samples_per_shard = samples_per_shard
        self._offsets: dict[str, int] | None = None

    def process(self, element: tuple[str, Iterable], counts: list[tuple[str, int]]) -> Iterator:
        if self._offsets is None:
            self._offsets, total = {}, 0
            for order, count in sorted(counts):
                self._offsets.setdefault(order, total)
                total += count
        order, groups = element
        first = self._offsets[order]
        per_shard = self._samples_per_shard
        for count, where in groups:
            local = 0
            while local < count:
                shard = (first + local) // per_shard
                n = min(count - local, (shard + 1) * per_shard - (first + local))
                yield shard, (first + local, local, n, where)
                local += n
            first += count


class WriteTextShard(beam.DoFn):
    """Lay out one shard's sequences from the packed groups they are in
    (:func:`corpora.tokens.pack_groups.group_sequences`, each group read back
    once) and write the shard (as :class:`WriteShard` does)."""

    def __init__(self, settings: BuildSettings, pad_id: int):
        self._settings = settings
        self._pad_id = pad_id
        self._reader: StashReader | None = None

    def setup(self) -> None:
        memory.settle_gc()
        self._reader = StashReader()

    def teardown(self) -> None:
        if self._reader is not None:
            self._reader.close()

    def process(self, element: tuple[int, Iterable[tuple]]) -> Iterator[dict]:
        shard_index, parts = element
        assert self._reader is not None
        groups = []
        for first, local, count, where in sorted(parts, key=lambda part: part[0]):
            group = self._reader.get(where)
            if isinstance(where, tuple):  # (order, tokens, lengths, counts, entries)
                group = PackedGroup(*group, kept=0, dropped=())
            groups.append((first, local, count, group))
        yield _write_shard(
            self._settings, shard_index, lambda _: self._samples(shard_index, groups)
        )

    def _samples(self, shard_index: int, groups: list[tuple]) -> Iterator:
        settings = self._settings
        for first, local, count, group in groups:
            sequences = group_sequences(group, local, count, settings.seq_len, self._pad_id)
            for number, sequence in enumerate(sequences, first):
                key = shards.sample_key(
                    settings.corpus, shard_index, number % settings.samples_per_shard
                )
                yield key, sequence


class PackText(beam.PTransform):
    """A text build's batches of records → shard infos, each batch packed where
    it is tokenized (the module doc). The result has ``shards``, ``kept``,
    ``dropped`` and ``sequence_stats`` (one accumulator per group, with
    ``stat_ids``), as :class:`PackSequences`'s."""

    def __init__(
        self, settings: BuildSettings, tokenizer: Tokenizer, stat_ids: stats.TokenIds | None = None
    ):
        super().__init__()
        self._settings = settings
        self._tokenizer = tokenizer
        self._stat_ids = stat_ids

    def expand(self, batches):
        settings = self._settings
        packed = batches | "PackGroup" >> beam.ParDo(
            PackTextGroup(settings, self._tokenizer, self._stat_ids)
        ).with_outputs(COUNTS, KEPT, DROPPED, SEQUENCE_STATS, main="groups")
        written = (
            packed.groups
            | "ByOrder" >> beam.GroupByKey()
            | "Place"
            >> beam.ParDo(
                PlaceGroups(settings.samples_per_shard), beam.pvalue.AsList(packed[COUNTS])
            )
            | "ByShard" >> beam.GroupByKey()
            | "WriteShard" >> beam.ParDo(WriteTextShard(settings, self._tokenizer.info.pad_id))
        )
        return {
            "shards": written,
            "kept": packed[KEPT],
            "dropped": packed[DROPPED],
            "sequence_stats": packed[SEQUENCE_STATS],
        }


def pack_step(stage, batches, build):
    """``pack``: the images kept documents lost counted, then every document
    tokenized, packed and written to shards (a text corpus's batches each
    where they are: :class:`PackText`); shards, documents kept and
    sequence statistics are ``build.outputs["shards"|"kept"|"sequence_stats"]``.
    The last stage: it returns nothing."""
    counted = batches | "CountRemovedImages" >> beam.ParDo(CountRemovedImages()).with_outputs(
        IMAGES_REMOVED, main="docs"
    )
    build.images_removed(counted[IMAGES_REMOVED])
    info = build.tokenizer.info
    if packs_where_tokenized(build.spec, build.settings):  # a text corpus: no document stashed
        packed = counted.docs | "PackText" >> PackText(
            build.settings, build.tokenizer, token_ids(info)
        )
    else:
        packed = (
            counted.docs
            | "Tokenize" >> beam.ParDo(Tokenize(build.tokenizer))
            | "PackSequences" >> PackSequences(build.settings, info.pad_id, token_ids(info))
        )
    build.dropped(stage.name, packed["dropped"])
    build.outputs.update(
        shards=packed["shards"], kept=packed["kept"], sequence_stats=packed["sequence_stats"]
    )
