"""Thin Beam wrappers over the core stages.

Each DoFn loads what is expensive once (``setup``), calls a core function,
counts, and routes drops to the ``dropped`` output. No business logic here.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
from typing import Any, Iterable, Iterator, Sequence

import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.metrics import Metrics

from corpora import fetch
from corpora.config.settings import BuildSettings
from corpora.config.spec import CorpusSpec
from corpora.dedup.images import hashing_fetch
from corpora.fetch.progress import FetchProgress
from corpora.record import Document, Drop
from corpora.sources.inputs import iter_lines
from corpora.stats.progress import Tally
from corpora.store.fetching import StoreFetch
from corpora.store.settings import StoreSettings
from corpora.store.stash import RECORDS
from corpora.tokens.pack_groups import TEXT_GROUP_SIZES, packs_where_tokenized
from corpora.tokens.tokenizer import TokenizedDocument, Tokenizer, tokenize_batch
from pipelines import memory, storage
from pipelines.storage import read_failure_urls
from pipelines.store import MarkComplete, StashReader, stash_files, stashed

DROPPED = "dropped"
INPUT = "input"
KEPT = "kept"
COUNTS = "counts"
SEQUENCE_STATS = "sequence_stats"
IMAGES = "images"
IMAGES_REMOVED = "images_removed"
FAILURES = "failures"
ARRIVED = "arrived"
SPLITS = "splits"
NAMESPACE = "corpora"

_LOG = logging.getLogger(__name__)


def route_result(result: Document | Drop | Any, stage: str):
    """Send a drop to the ``dropped`` output (and its counter); pass the rest."""
    if isinstance(result, Drop):
        Metrics.counter(NAMESPACE, f"dropped.{result.reason}").inc(result.count)
        return beam.pvalue.TaggedOutput(DROPPED, result)
    Metrics.counter(NAMESPACE, f"{stage}.out").inc()
    return result


# Records travel in batches (lists) of MIN_BATCH to MAX_BATCH from the read
# on, the unit every stage takes: Beam's cost is per element.
MIN_BATCH, MAX_BATCH = 16, 256


def record_batches() -> beam.BatchElements:
    """Records into batches (lists) of up to :data:`MAX_BATCH` (after a
    global selection, which takes records one by one)."""
    return beam.BatchElements(min_batch_size=MIN_BATCH, max_batch_size=MAX_BATCH)


def route_batch(results: Iterable, stage: str) -> Iterator:
    """A batch's results: each drop to ``dropped``, the records kept as one
    list (nothing when none is kept)."""
    kept = []
    for result in results:
        if isinstance(result, Drop):
            yield route_result(result, stage)
        else:
            kept.append(result)
    if kept:
        Metrics.counter(NAMESPACE, f"{stage}.out").inc(len(kept))
        yield kept


class Spread(beam.PTransform):
    """Batches of records → the same batches, spread over every worker.

    Each batch is written to the build's stash (``.corpora/records``) and only
    its reference crosses between workers, so the runner holds a few hundred
    bytes per batch, not the records (on DirectRunner a shuffle's data stays
    in the launching process until the build ends). Where the stash cannot be
    reached (:func:`pipelines.store.stash_files`), the batches cross as they are.
    """

    def __init__(self, output: str):
        super().__init__()
        self._output = output

    def expand(self, batches):
        return (
            batches
            | "Stash" >> beam.ParDo(_StashBatch(self._output))
            | "Reshuffle" >> beam.Reshuffle()
            | "Unstash" >> beam.ParDo(_UnstashBatch())
        )


class _StashBatch(beam.DoFn):
    def __init__(self, output: str):
        self._output = output
        self._files = None

    def setup(self) -> None:
        memory.settle_gc()
        self._files = stash_files(self._output, RECORDS)

    def process(self, batch: list) -> Iterator:
        yield stashed(self._files, batch)


class _UnstashBatch(beam.DoFn):
    def setup(self) -> None:
        memory.settle_gc()
        self._reader = StashReader()

    def teardown(self) -> None:
        self._reader.close()

    def process(self, where) -> Iterator[list]:
        yield self._reader.get(where)


class ReadSource(beam.DoFn):
    """One input file → the corpus's records, in batches (lists) that grow
    from :data:`MIN_BATCH` to :data:`MAX_BATCH` records, so that a small
    input still spreads over the workers (a text build's from 16 to 2,048:
    its packing groups, :data:`corpora.tokens.pack_groups.TEXT_GROUP_SIZES`);
    counts every funnel unit read (and, for a local build's progress line, the input bytes read:
    ``progress``, a folder of :class:`~corpora.stats.progress.Tally` files)."""

    def __init__(
        self,
        spec: CorpusSpec,
        settings: BuildSettings,
        progress: str | None = None,
        lines: bool = False,
    ):
        self._spec = spec
        self._settings = settings
        self._progress = progress
        self._lines = lines
        self._tally: Tally | None = None
        self._bytes_done = 0  # of the files read to their end

    def setup(self) -> None:
        memory.settle_gc()
        if self._progress is not None:
            self._tally = Tally(self._progress, f"read-{os.getpid()}-{id(self)}")

    def _count(self, units: int, stream=None) -> None:
        """Count ``units`` read; now and then, with the input bytes read so far
        (``stream``: the file being read; ``None``: none, write now)."""
        tally = self._tally
        if tally is None:
            return
        tally.add(records_read=units)
        if stream is None or tally.due():
            position = 0
            with contextlib.suppress(OSError, ValueError, AttributeError):
                position = stream.tell() if stream is not None else 0
            tally.set(bytes_read=self._bytes_done + position)
            tally.write()

    def process(self, readable_file) -> Iterator:
        path = readable_file.metadata.path
        units = 0
        # the split rides along to the fetch stage, which removes it; a text corpus has none
        store = self._settings.store.uri is not None and self._spec.images
        split = fetch.store_split(path) if store else None
        # a text build packs each batch where it tokenizes it: larger batches, its groups
        smallest, largest = (
            TEXT_GROUP_SIZES
            if packs_where_tokenized(self._spec, self._settings)
            else (MIN_BATCH, MAX_BATCH)
        )
        batch, size = [], smallest
        with readable_file.open() as stream:
            for result in self._items(stream, path):
                if isinstance(result, Drop):
                    units += result.count
                    self._count(result.count, stream)
                    yield route_result(result, "read")
                    continue
                units += 1
                self._count(1, stream)
                if split is not None:
                    result = result.with_meta(**{fetch.STORE_SPLIT: split})
                batch.append(result)
                if len(batch) == size:
                    yield from self._batch(path, batch)
                    batch, size = [], min(2 * size, largest)
        self._bytes_done += getattr(readable_file.metadata, "size_in_bytes", 0) or 0
        self._count(0)
        yield from self._batch(path, batch)
        Metrics.counter(NAMESPACE, "input").inc(units)
        yield beam.pvalue.TaggedOutput(INPUT, units)

    def _items(self, stream, path: str) -> Iterable:
        """The corpus's records and drops, or with ``lines`` its raw lines as
        ``(line number, raw line)``, which the workers parse (:class:`ParseLines`)."""
        if self._lines:
            return iter_lines(stream, path, self._settings.max_line_bytes)
        return self._spec.read(stream, path, self._settings)

    def _batch(self, path: str, batch: list) -> Iterable:
        """What leaves with a batch: its records (and, without ``lines``, their
        counters), or with ``lines`` the block ``(path, lines)``; nothing when empty."""
        if self._lines:
            return [(path, batch)] if batch else []
        return route_batch(batch, "read")


class ParseLines(beam.DoFn):
    """A block of raw lines (:class:`ReadSource` with ``lines``) → its records
    (the corpus's ``parse_line``), one batch; the lines that cannot be used
    go to ``dropped``, as the reader would have sent them."""

    def __init__(self, spec: CorpusSpec, settings: BuildSettings):
        self._parse = spec.parse_line
        self._settings = settings

    def setup(self) -> None:
        memory.settle_gc()

    def process(self, block: tuple[str, list]) -> Iterator:
        path, lines = block
        parse, settings = self._parse, self._settings
        records = (parse(raw, path, number, settings) for number, raw in lines)
        yield from route_batch(records, "read")


def reads_lines(spec: CorpusSpec, settings: BuildSettings) -> bool:
    """Whether a build's reader hands raw lines to the workers, which parse
    them: a text build packed where it tokenizes, of a line-oriented corpus.
    The reader then only decompresses and cuts lines, the one step no other
    worker can share, and the lines spread cost a tenth of parsed records."""
    return spec.parse_line is not None and packs_where_tokenized(spec, settings)


class FetchImages(beam.DoFn):
    """Fetch the images of a batch of records, many requests in flight.

    Emits the records kept as one batch (a list) and the drops; besides, on
    ``images`` an ``(outcome, n)`` per outcome (``ok`` or a reason) for every
    image that reached the stage,
    and on ``failures`` one row per failed URL for ``failures.parquet``.

    With a store or an img2dataset download (``store``), URLs are looked up
    there first (:class:`corpora.store.fetching.StoreFetch`); ``arrived``
    then counts ``(arrival, n)`` (``fetched``, ``store``, ``img2dataset``)
    and ``splits`` names each input split the stage saw, for its marker.
    """

    def __init__(
        self,
        spec: CorpusSpec,
        settings: fetch.FetchSettings,
        store: StoreSettings | None = None,
        progress: str | None = None,
    ):
        self._spec = spec
        self._settings = settings
        # a local build's progress folder: the build prints one line, this worker none
        self._progress_folder = progress
        self._tally: Tally | None = None
        self._store = store if store is not None and store.used else None
        self._through: StoreFetch | None = None
        self._splits: set[str] = set()
        self._fetcher: fetch.Fetcher | None = None
        self._retry: frozenset[str] | None = None
        self._progress: FetchProgress | None = None
        self._reported = 0

    def setup(self) -> None:
        memory.settle_gc()
        memory.purge_periodically()
        self._fetcher = fetch.Fetcher(self._settings)
        if self._progress_folder is None:
            self._progress = FetchProgress(self._settings.progress_interval)
        else:
            self._progress = FetchProgress(0)
            self._tally = Tally(self._progress_folder, f"fetch-{os.getpid()}-{id(self)}")
        if self._settings.retry_failures:
            self._retry = read_failure_urls(
                self._settings.retry_failures, self._settings.retry_reasons
            )
        if self._store is not None:
            self._through = StoreFetch(
                self._store,
                self._fetcher,
                self._settings.respect_opt_out,
                again=self._retry or frozenset(),
            )

    def teardown(self) -> None:
        if self._through is not None:
            self._through.close()
        if self._fetcher is not None:
            self._fetcher.close()

    def start_bundle(self) -> None:
        self._splits = set()

    def finish_bundle(self) -> None:
        # a closing line for the work since the last one, so a short bundle reports too
        if (
            self._progress is not None
            and self._progress.interval > 0
            and self._progress.done > self._reported
        ):
            self._progress.report()
            self._reported = self._progress.done
        if self._tally is not None:
            self._tally.write()

    def process(self, batch: list[Document]) -> Iterator:
        assert self._fetcher is not None and self._progress is not None
        docs = []
        for doc in batch:
            selected = doc if self._retry is None else fetch.select_for_retry(doc, self._retry)
            if isinstance(selected, Drop):
                yield route_result(selected, "fetch")
            else:
                docs.append(selected)
        urls = {}  # url → the input split of the first record holding it
        for doc in docs:
            split = doc.meta.get(fetch.STORE_SPLIT, "")
            for img in doc.images:
                if not img.fetched:
                    urls.setdefault(img.url, split)
        if self._through is None:
            fetched = ((url, outcome, "fetched") for url, outcome in self._fetcher.fetch(urls))
        else:
            fetched = self._through.fetch(urls)
        results, arrivals = {}, {}
        for url, outcome, arrival in fetched:
            results[url], arrivals[url] = outcome, arrival
            self._progress.update(outcome.ok)
            if self._tally is not None:
                self._tally.add(images=1, images_ok=int(outcome.ok))
                if self._tally.due():  # a batch waiting on a slow server still shows progress
                    self._tally.write()
            if not outcome.ok:
                yield beam.pvalue.TaggedOutput(
                    FAILURES,
                    {
                        "url": url,
                        "reason": outcome.reason,
                        "status": outcome.status,
                        "attempts": outcome.attempts,
                    },
                )
        counts = collections.Counter(
            results[img.url].reason or "ok" for doc in docs for img in doc.images if not img.fetched
        )
        for outcome, count in counts.items():
            Metrics.counter(NAMESPACE, f"images.{outcome}").inc(count)
            yield beam.pvalue.TaggedOutput(IMAGES, (outcome, count))
        if self._through is not None:
            self._through.commit()  # a kill from here on refetches nothing of this batch
            arrived = collections.Counter(
                arrivals[img.url] for doc in docs for img in doc.images if not img.fetched
            )
            for arrival, count in arrived.items():
                Metrics.counter(NAMESPACE, f"arrived.{arrival}").inc(count)
                yield beam.pvalue.TaggedOutput(ARRIVED, (arrival, count))
        attached = []
        for doc in docs:
            split = doc.meta.get(fetch.STORE_SPLIT)
            if split is not None:
                doc = fetch.without_store_split(doc)
                if split not in self._splits:
                    self._splits.add(split)
                    yield beam.pvalue.TaggedOutput(SPLITS, split)
            attached.append(fetch.attach_images(doc, results, self._spec.drop_on_image_failure))
        yield from route_batch(attached, "fetch")
        if self._tally is not None:
            self._tally.add(records_fetched=len(batch))
            if self._tally.due():
                self._tally.write()
        memory.trim()  # the batch's decoded images are freed: give their pages back


class CountRemovedImages(beam.DoFn):
    """Count, by reason, the images that a batch's kept documents lost to a
    filter (``--min-sim``, ``--max-images``, CLIP): ``images_removed.<reason>``
    counters, and ``(reason, n)`` on ``images_removed`` for the manifest.
    The batch passes unchanged."""

    def process(self, batch: list[Document]) -> Iterator:
        removed = collections.Counter()
        for doc in batch:
            removed.update(doc.meta.get("images_removed") or {})
        for reason, count in sorted(removed.items()):
            Metrics.counter(NAMESPACE, f"images_removed.{reason}").inc(count)
            yield beam.pvalue.TaggedOutput(IMAGES_REMOVED, (reason, count))
        yield batch


class Tokenize(beam.DoFn):
    """A batch of documents → the batch tokenized, its texts encoded in one call
    (:func:`corpora.tokens.tokenizer.tokenize_batch`)."""

    def __init__(self, tokenizer: Tokenizer):
        self._tokenizer = tokenizer

    def process(self, batch: list[Document]) -> Iterator[list[TokenizedDocument]]:
        yield tokenize_batch(batch, self._tokenizer)


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


# --- the wrappers of the stage list (corpora.stages) -----------------------------


def read_step(stage, batches, build):
    """``read``: the input files → batches of records; the input count is
    ``build.outputs["input"]``."""
    lines = reads_lines(build.spec, build.settings)
    read = input_files(build.pipeline, build.settings.inputs) | "Read" >> beam.ParDo(
        ReadSource(build.spec, build.settings, build.progress, lines=lines)
    ).with_outputs(DROPPED, INPUT, main="docs")
    build.outputs["input"] = read[INPUT]
    if not lines:
        build.dropped(stage.name, read[DROPPED])
        return read.docs
    # the blocks of lines spread over the workers, which parse them (the spread stage is done)
    parsed = (
        read.docs
        | "SpreadLines" >> Spread(build.settings.output)
        | "Parse"
        >> beam.ParDo(ParseLines(build.spec, build.settings)).with_outputs(DROPPED, main="docs")
    )
    build.dropped(stage.name, parsed[DROPPED])
    return parsed.docs


def spread_step(stage, batches, build):
    """``spread``: the batches over every worker; a build stashes them and
    moves references (:class:`Spread`); ``corpora fetch`` moves the records,
    which nothing reads after the fetch."""
    if build.purpose == "fetch":
        return batches | "Spread" >> beam.Reshuffle()
    if reads_lines(build.spec, build.settings):  # the read spread its lines: parsed on every worker
        return batches
    return batches | "Spread" >> Spread(build.settings.output)


def fetch_step(stage, batches, build):
    """``fetch``: every record's images fetched (through the image store); the
    store's split markers once the splits are complete. Image outcomes,
    failures and arrivals are ``build.outputs["images"|"failures"|"arrived"]``."""
    settings = build.settings
    fetched = batches | "Fetch" >> beam.ParDo(
        # with a perceptual hash of each image when a dedup rule needs one (corpora.dedup)
        FetchImages(build.spec, hashing_fetch(settings), settings.store, build.progress)
    ).with_outputs(DROPPED, IMAGES, FAILURES, ARRIVED, SPLITS, main="docs")
    _ = fetched[SPLITS] | "StoreMarkers" >> MarkComplete(settings.store)
    build.dropped(stage.name, fetched[DROPPED])
    build.outputs.update(
        images=fetched[IMAGES], failures=fetched[FAILURES], arrived=fetched[ARRIVED]
    )
    return fetched.docs
