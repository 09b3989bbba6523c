"""Thin Beam wrappers over the core stages.

Each DoFn loads what is expensive once (``setup``), calls a core function,
counts, and routes drops to the ``dropped`` output. No business logic here.
"""

from __future__ import annotations

import collections
import logging
import uuid
from typing import Any, Iterable, Iterator

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from corpora import fetch, pack, shards
from corpora.accounting import read_failure_urls
from corpora.catalog import CorpusSpec
from corpora.progress import Progress
from corpora.record import Document, Drop
from corpora.settings import BuildSettings
from corpora.tokenize import Tokenizer, TokenizedDocument, tokenize_document

DROPPED = "dropped"
INPUT = "input"
KEPT = "kept"
COUNTS = "counts"
IMAGES = "images"
FAILURES = "failures"
NAMESPACE = "corpora"

_LOG = logging.getLogger(__name__)


def _route(result: Document | Drop | Any, stage: str):
    """Send a drop to the ``dropped`` output (and its counter); pass the rest."""
    if isinstance(result, Drop):
        Metrics.counter(NAMESPACE, f"dropped.{result.reason}").inc(result.count)
        return beam.pvalue.TaggedOutput(DROPPED, result)
    Metrics.counter(NAMESPACE, f"{stage}.out").inc()
    return result


class ReadSource(beam.DoFn):
    """One input file → the corpus's records; counts every funnel unit read."""

    def __init__(self, spec: CorpusSpec, settings: BuildSettings):
        self._spec = spec
        self._settings = settings

    def process(self, readable_file) -> Iterator:
        path = readable_file.metadata.path
        units = 0
        with readable_file.open() as stream:
            for result in self._spec.read(stream, path, self._settings):
                units += result.count if isinstance(result, Drop) else 1
                yield _route(result, "read")
        Metrics.counter(NAMESPACE, "input").inc(units)
        yield beam.pvalue.TaggedOutput(INPUT, units)


class FetchImages(beam.DoFn):
    """Fetch the images of a batch of records, many requests in flight.

    Besides the records (and drops), emits on ``images`` an ``(outcome, n)``
    per outcome (``ok`` or a reason) for every image that reached the stage,
    and on ``failures`` one row per failed URL for ``failures.parquet``.
    """

    def __init__(self, spec: CorpusSpec, settings: fetch.FetchSettings):
        self._spec = spec
        self._settings = settings
        self._fetcher: fetch.Fetcher | None = None
        self._retry: frozenset[str] | None = None
        self._progress: Progress | None = None

    def setup(self) -> None:
        self._fetcher = fetch.Fetcher(self._settings)
        self._progress = Progress(self._settings.progress_interval)
        if self._settings.retry_failures:
            self._retry = read_failure_urls(self._settings.retry_failures, self._settings.retry_reasons)

    def teardown(self) -> None:
        if self._fetcher is not None:
            self._fetcher.close()

    def process(self, batch: list[Document]) -> Iterator:
        assert self._fetcher is not None and self._progress is not None
        docs = []
        for doc in batch:
            selected = doc if self._retry is None else fetch.select_for_retry(doc, self._retry)
            if isinstance(selected, Drop):
                yield _route(selected, "fetch")
            else:
                docs.append(selected)
        urls = dict.fromkeys(img.url for doc in docs for img in doc.images if not img.fetched)
        results = {}
        for url, outcome in self._fetcher.fetch(urls):
            results[url] = outcome
            self._progress.update(outcome.ok)
            if not outcome.ok:
                yield beam.pvalue.TaggedOutput(FAILURES, {
                    "url": url, "reason": outcome.reason, "status": outcome.status, "attempts": outcome.attempts})
        counts = collections.Counter(results[img.url].reason or "ok"
                                     for doc in docs for img in doc.images if not img.fetched)
        for outcome, count in counts.items():
            Metrics.counter(NAMESPACE, f"images.{outcome}").inc(count)
            yield beam.pvalue.TaggedOutput(IMAGES, (outcome, count))
        for doc in docs:
            yield _route(fetch.attach_images(doc, results, self._spec.drop_on_image_failure), "fetch")


class Tokenize(beam.DoFn):
    def __init__(self, tokenizer: Tokenizer):
        self._tokenizer = tokenizer

    def process(self, doc: Document) -> Iterator[TokenizedDocument]:
        yield tokenize_document(doc, self._tokenizer)


class PackGroup(beam.DoFn):
    """Pack one group's documents, in id order, into sequences.

    Emits ``(group, index, sequence)`` and, on ``counts``, ``(group, n)``.
    """

    def __init__(self, settings: BuildSettings, pad_id: int):
        self._settings = settings
        self._pad_id = pad_id

    def process(self, element: tuple[int, Iterable[TokenizedDocument]]) -> Iterator:
        group, docs = element
        ordered = sorted(docs, key=lambda d: d.id)
        count = 0
        for count, sequence in enumerate(pack.pack_greedy(ordered, self._settings.seq_len, self._pad_id), 1):
            yield group, count - 1, sequence
        Metrics.counter(NAMESPACE, "sequences").inc(count)
        yield beam.pvalue.TaggedOutput(COUNTS, (group, count))
        yield beam.pvalue.TaggedOutput(KEPT, len(ordered))


def assign_shard(element: tuple[int, int, pack.PackedSequence], counts: dict[int, int],
                 samples_per_shard: int) -> tuple[int, tuple[int, pack.PackedSequence]]:
    """Number a group's sequences globally (groups in order) and pick the shard."""
    group, index, sequence = element
    global_index = sum(n for g, n in counts.items() if g < group) + index
    return global_index // samples_per_shard, (global_index, sequence)


class WriteShard(beam.DoFn):
    """Write one shard under a temporary name, then rename it into place."""

    def __init__(self, settings: BuildSettings):
        self._settings = settings

    def process(self, element: tuple[int, Iterable[tuple[int, pack.PackedSequence]]]) -> Iterator[dict]:
        shard_index, items = element
        corpus = self._settings.corpus
        name = shards.shard_name(corpus, shard_index)
        final = FileSystems.join(self._settings.output, name)
        temporary = f"{final}.tmp-{uuid.uuid4().hex}"
        samples = (
            (shards.sample_key(corpus, shard_index, global_index % self._settings.samples_per_shard), sequence)
            for global_index, sequence in sorted(items, key=lambda item: item[0])
        )
        with FileSystems.create(temporary) as stream:
            info = shards.write_shard(stream, samples)
        FileSystems.rename([temporary], [final])
        Metrics.counter(NAMESPACE, "shards").inc()
        yield {"index": shard_index, "path": name, **info}
