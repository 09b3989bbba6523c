"""The fetch stage's images through the store: look each URL up, fetch only
what is unknown, keep every outcome.

:class:`StoreFetch` answers, for a batch of image URLs (each with the input
split it was read from), the same :class:`~corpora.fetch.ImageOutcome` a
direct fetch gives, from the first place that has it:

1. an img2dataset download (``--images-from``), when there is one;
2. the store: a stored original is read back and goes through the fetch
   stage's own :func:`~corpora.fetch.process_image`, so a build from the
   store writes the bytes a direct fetch would, at any ``--image-size`` and
   ``--resize-mode``; a recorded failure is that failure again, unless
   :func:`~corpora.store.needs_fetch` says to try it once more
   (``--refetch-failures``: timeouts, connection errors, 5xx, 429, the
   failures of a build's limits and robots.txt; never an opt-out);
3. the network, through the :class:`~corpora.fetch.Fetcher`, whose
   ``on_body`` hook hands each body to the split's
   :class:`~corpora.store.StoreWriter` as it arrives; every failure without
   a body is recorded too (a redirect loop, a robots.txt refusal …), so a
   rebuild asks for none of them, except those that depend on this build's
   own settings (:data:`NOT_RECORDED`), which another build may not share.
   The fetcher's robots.txt answers are kept in the store as well
   (:meth:`~corpora.store.ImageStore.robots`).

Each answer says where it came from (:data:`ARRIVALS`), so the manifest can
count how the images arrived. Outcomes are committed to the store after each
batch (:meth:`StoreFetch.commit`), so a build killed while fetching loses at
most the batch in flight.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable, Iterator, Mapping

from corpora.fetch.settings import SETTINGS_REASONS, ImageOutcome
from corpora.store.img2dataset_output import Img2DatasetOutput
from corpora.store.index import StoreIndex
from corpora.store.layout import ImageStore
from corpora.store.outcomes import Failed, Stored, Unknown, needs_fetch
from corpora.store.reader import ImageReader
from corpora.store.settings import ABSENT_REASON, StoreSettings
from corpora.store.writer import StoreWriter

FETCHED, STORE, IMG2DATASET = "fetched", "store", "img2dataset"
ARRIVALS = (FETCHED, STORE, IMG2DATASET)
# Opt-outs: fetched again only with --ignore-opt-out.
OPT_OUTS = frozenset({"opted_out", "tdm_reserved"})
# Failures that say more about this build's settings than about the image: local
# files, the address guard's networks, --max-image-bytes. Another build may allow
# them, so they are not kept (and one a store kept before is not believed). A
# redirect loop is the server's doing (the redirect cap is fixed): it is kept.
NOT_RECORDED = frozenset(SETTINGS_REASONS) - {"too_many_redirects"}


def outcome_of_failure(url: str, failed: Failed) -> ImageOutcome:
    """A recorded failure as the fetch stage's outcome (no attempt made now).

    >>> outcome_of_failure("u", Failed("u", "http_404", 404)).reason
    'http_404'
    """
    return ImageOutcome(url, reason=failed.reason, status=failed.status, detail=failed.detail)


class StoreFetch:
    """One fetch worker's images through the store and a download.

    ``fetcher`` is the worker's :class:`~corpora.fetch.Fetcher` (its decode
    pool also resizes the stored images). ``again``: URLs whose recorded
    failures are fetched again all the same (``--retry-failures``' list; an
    opt-out still only with ``--ignore-opt-out``). Used by one thread;
    :meth:`close` commits what is open.
    """

    def __init__(
        self,
        settings: StoreSettings,
        fetcher,
        respect_opt_out: bool = True,
        again: frozenset[str] = frozenset(),
        clock: Callable[[], float] = time.time,
    ):
        self.settings = settings
        self._again = again  # --retry-failures: URLs to fetch again whatever was recorded
        self._fetcher = fetcher
        self._respect_opt_out = respect_opt_out
        self._clock = clock
        self._store: ImageStore | None = None
        self._download: StoreIndex | None = None
        self._reader = ImageReader()
        self._indexes: dict[str, StoreIndex] = {}
        self._writers: dict[str, StoreWriter] = {}
        self._fetching: Mapping[str, str] = {}
        self._bodies: set[str] = set()
        fetcher.on_body = self._on_body

    @property
    def store(self) -> ImageStore | None:
        """The store, opened (and created) when first needed: a build without
        images leaves no store behind."""
        if self._store is None and self.settings.uri is not None:
            self._store = ImageStore.open(self.settings.uri)
        return self._store

    @property
    def download(self) -> StoreIndex | None:
        """The img2dataset download's index, read when first needed."""
        if self._download is None and self.settings.images_from is not None:
            self._download = Img2DatasetOutput(self.settings.images_from).index()
        return self._download

    def index(self, split: str) -> StoreIndex:
        """The split's committed outcomes, and those this worker added since."""
        found = self._indexes.get(split)
        if found is None:
            assert self.store is not None
            found = self._indexes[split] = self.store.index([split])
        return found

    def _wants(self, found: Stored | Failed | Unknown) -> bool:
        if isinstance(found, Failed) and found.reason in OPT_OUTS:
            return not self._respect_opt_out  # --ignore-opt-out asks for them
        if isinstance(found, Failed) and (found.url in self._again or found.reason in NOT_RECORDED):
            return True
        return needs_fetch(found, self.settings.refetch_failures)

    def fetch(self, wanted: Mapping[str, str]) -> Iterator[tuple[str, ImageOutcome, str]]:
        """``(url, outcome, arrival)`` for every URL of ``wanted`` (URL → split)."""
        if not wanted:
            return
        stored: list[tuple[str, Stored, str]] = []
        to_fetch: dict[str, str] = {}
        download = self.download
        for url, split in wanted.items():
            found: Stored | Failed | Unknown = Unknown()
            arrival = IMG2DATASET
            if download is not None:
                found = download.lookup(url)
            if isinstance(found, Unknown) and self.store is not None:
                found, arrival = self.index(split).lookup(url), STORE
            if isinstance(found, Stored):
                stored.append((url, found, arrival))
            elif not self._wants(found):
                assert isinstance(found, Failed)
                yield url, outcome_of_failure(url, found), arrival
            elif (
                download is not None
                and self.settings.absent == "drop"
                and isinstance(found, Unknown)
            ):
                yield url, ImageOutcome(url, reason=ABSENT_REASON), IMG2DATASET
            else:
                to_fetch[url] = split
        yield from self._from_store(stored)
        yield from self._from_network(to_fetch)

    def _from_store(self, stored: list[tuple[str, Stored, str]]) -> Iterator:
        from corpora.fetch import process_image

        settings = self._fetcher.settings
        futures = [
            (url, found, arrival, self._fetcher.decoder.submit(process_image, data, settings))
            for url, found, arrival in stored
            for data in (self._reader.read(found.ref),)
        ]
        for url, found, arrival, future in futures:
            outcome = dataclasses.replace(future.result(), url=url, status=found.status)
            yield url, outcome, arrival

    def _from_network(self, to_fetch: dict[str, str]) -> Iterator:
        if not to_fetch:
            return
        self._fetching, self._bodies = to_fetch, set()
        if self.store is not None and self._fetcher.robots.keeper is None:
            self._fetcher.robots.keeper = self.store.robots()
        try:
            for url, outcome in self._fetcher.fetch(to_fetch):
                if (
                    self.settings.uri is not None
                    and outcome.reason is not None
                    and url not in self._bodies
                    and outcome.reason not in NOT_RECORDED
                ):
                    split = to_fetch[url]
                    failed = self._writer(split).add_failure(
                        url, outcome.reason, outcome.status, outcome.detail
                    )
                    self.index(split).add(self._clock(), failed)
                yield url, outcome, FETCHED
        finally:
            self._fetching = {}

    def _on_body(self, url: str, body: bytes, status: int | None) -> None:
        split = self._fetching.get(url)
        if self.settings.uri is None or split is None:
            return
        self._bodies.add(url)
        self.index(split).add(self._clock(), self._writer(split).add(url, body, status))

    def _writer(self, split: str) -> StoreWriter:
        writer = self._writers.get(split)
        if writer is None:
            assert self.store is not None
            writer = self._writers[split] = self.store.writer(split)
        return writer

    def commit(self) -> None:
        """Commit every open part (after each batch)."""
        for writer in self._writers.values():
            writer.flush()

    def close(self) -> None:
        self.commit()
        self._reader.close()
        for index in self._indexes.values():
            index.close()
        self._indexes = {}


def arrival_summary(counts: Mapping[str, int]) -> dict[str, int]:
    """The manifest's ``images_arrived``: images by where their outcome came
    from, every arrival named (they add up to ``images.input``).

    >>> arrival_summary({"store": 7, "fetched": 2})
    {'fetched': 2, 'store': 7, 'img2dataset': 0}
    """
    return {arrival: int(counts.get(arrival, 0)) for arrival in ARRIVALS}
