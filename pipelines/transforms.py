"""Thin Beam wrappers over the core stages.

Each DoFn loads what is expensive once (``setup``), calls a core function,
counts, and routes drops to the ``dropped`` output. No business logic here.
"""

from __future__ import annotations

import concurrent.futures
import logging
import uuid
from typing import Any, Iterable, Iterator

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from corpora import fetch, pack, shards
from corpora.catalog import CorpusSpec
from corpora.record import Document, Drop
from corpora.settings import BuildSettings
from corpora.tokenize import Tokenizer, TokenizedDocument, tokenize_document
from pipelines import resume

DROPPED = "dropped"
INPUT = "input"
KEPT = "kept"
COUNTS = "counts"
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
    """Fetch the images of a batch of records with a pool of threads."""

    def __init__(self, spec: CorpusSpec, settings: fetch.FetchSettings):
        self._spec = spec
        self._settings = settings
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None

    def setup(self) -> None:
        self._pool = concurrent.futures.ThreadPoolExecutor(self._settings.concurrency)

    def teardown(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def process(self, batch: list[Document]) -> Iterator:
        assert self._pool is not None
        urls = list(dict.fromkeys(img.url for doc in batch for img in doc.images if not img.fetched))
        futures = {url: self._pool.submit(fetch.fetch_image, url, self._settings) for url in urls}
        results = {url: future.result() for url, future in futures.items()}
        for fetched, image in results.values():
            reason = fetched.reason or (image.reason if image else None)
            Metrics.counter(NAMESPACE, f"images.{reason or 'ok'}").inc()
        for doc in batch:
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
    """Write one shard under a temporary name, then rename it into place and
    mark it complete; a shard a previous attempt completed is left as it is."""

    def __init__(self, settings: BuildSettings):
        self._settings = settings

    def process(self, element: tuple[int, Iterable[tuple[int, pack.PackedSequence]]]) -> Iterator[dict]:
        shard_index, items = element
        corpus = self._settings.corpus
        name = shards.shard_name(corpus, shard_index)
        final = FileSystems.join(self._settings.output, name)
        temporary = f"{final}.tmp-{uuid.uuid4().hex}"
        samples = [
            (shards.sample_key(corpus, shard_index, global_index % self._settings.samples_per_shard), sequence)
            for global_index, sequence in sorted(items, key=lambda item: item[0])
        ]
        info = resume.completed_shard(self._settings.output, name, samples)
        if info is not None:  # a previous attempt wrote exactly this shard: leave it
            Metrics.counter(NAMESPACE, "shards.resumed").inc()
            yield {"index": shard_index, "path": name, **info}
            return
        with FileSystems.create(temporary) as stream:
            info = shards.write_shard(stream, samples)
        FileSystems.rename([temporary], [final])
        resume.write_marker(self._settings.output, name, info)
        Metrics.counter(NAMESPACE, "shards").inc()
        Metrics.counter(NAMESPACE, "bytes").inc(info["bytes"])
        yield {"index": shard_index, "path": name, **info}
