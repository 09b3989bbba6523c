"""The torch-facing loader: from builds to batches of static shapes.

    >>> from trainer.loader import DataConfig, Loader
    >>> config = DataConfig(
    ...     sources=(("corpora-out/mmc4-pairs", 8.0), ("corpora-out/c4", 1.0)),
    ...     batch_size=32, objective="prefixlm", image_size=(224, 224))
    >>> loader = Loader(config, rank=rank, world_size=world_size)  # doctest: +SKIP
    >>> loader.spec  # DataSpec: seq_len, pad_id, image_token_id, ...  # doctest: +SKIP
    >>> for step, batch in zip(range(steps), loader):  # endless  # doctest: +SKIP
    ...     batch["input_ids"], batch["images"], batch["decoder_target_ids"]
    >>> checkpoint["data"] = loader.state_dict()  # doctest: +SKIP
    >>> loader.load_state_dict(checkpoint["data"])  # on resume  # doctest: +SKIP

A batch is a ``dict[str, torch.Tensor]``, always of the same shapes (B = batch
size, L = seq_len, M = max_images of the builds, H x W = ``image_size``):
``input_ids``, ``segment_ids``, ``positions`` int64 [B, L]; ``images`` float32
[B, M, 3, H, W], normalised, zeros in empty slots; ``image_mask`` bool [B, M];
for ``vila`` also ``labels`` and ``position_ids``; for ``prefixlm`` the
encoder and decoder arrays of :func:`trainer.features.prefixlm_features`.

**Packed PrefixLM.** With ``encoder_len`` and ``decoder_len`` a row holds the
documents of several samples (:class:`PrefixLMPacker`, first fit in stream
order; the documents it leaves wait for the next rows), written by
:func:`trainer.features.pack_prefixlm`: the ``encoder_*`` arrays are
``[B, encoder_len]``, the ``decoder_*`` arrays ``[B, decoder_len]``, ``images``
``[B, encoder_len // tokens_per_image, 3, H, W]``, and there are no
``input_ids``, ``segment_ids`` and ``positions``.

**Workers and nodes.** Each of ``num_workers`` loader processes on each of
``world_size`` nodes is one consumer with its own shards
(:func:`trainer.stream.split_shards`) and its own seeded streams; torch's
DataLoader takes one batch from each worker in turn. ``num_workers=0`` reads
in the calling process, exactly as one worker would.

**Resume.** Each worker sends its stream's state with every batch; the
loader keeps the state of the last batch it handed out from each worker,
so ``state_dict()`` describes what the trainer consumed, not what was
prefetched. On resume the workers are started in the order that continues
the round, so the next batches are byte for byte those an uninterrupted run
would have given (same seed, sources, batch size, world size and workers).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any, Iterator, Sequence

import numpy as np

from corpora import reader
from corpora.config.extras import missing_extra

try:
    import torch
except ImportError as exc:  # fail at import, naming the fix, not inside a worker
    raise missing_extra("train", "the trainer's loader", exc) from None

from trainer.batch import (
    MAX_BATCH_BYTES,
    batch_bytes,
    collate,
    load_image,
    stack_images,
)
from trainer.blend import (
    Blend,
    DataSpec,
    Source,
    check_blend,
    empty_counts,
    resolve_source,
)
from trainer.config import DataConfig, data_config  # noqa: F401  (the loader's settings)
from trainer.features import (
    document_runs,
    pack_prefixlm,
    packable_bounds,
    prefixlm_features,
    vila_features,
    without_target,
)
from trainer.stream import DataError, ShardStream, _reason, _seeded, split_shards

log = logging.getLogger("trainer.data")

STATE_FORMAT = "corpora-loader/1"
PACK_WINDOW = 64  # PrefixLM documents a row may choose from (first fit, in stream order)


def smoke_data_config() -> DataConfig:
    """The bundled sample build (``corpora build mmc4-pairs --smoke``), read in-process."""
    return data_config(
        ["corpora-out/mmc4-pairs"], batch_size=2, num_workers=0, shuffle_buffer=4, image_size=64
    )


def sample_check(spec: DataSpec):
    """``check(sample)``: why a sample cannot go into this blend's batches, or None."""

    def check(sample: reader.Sample) -> str | None:
        for name in ("input_ids", "segment_ids", "positions"):
            shape = getattr(sample, name).shape
            if shape != (spec.seq_len,):
                return f"{name} of shape {shape}, the blend's seq_len is {spec.seq_len}"
        if len(sample.images) > spec.max_images:
            return f"{len(sample.images)} images, max_images_per_sample is {spec.max_images}"
        slots = (
            int((sample.input_ids == spec.image_token_id).sum())
            if spec.image_token_id is not None
            else 0
        )
        if slots != len(sample.images) * spec.tokens_per_image:
            return f"{slots} image slots for {len(sample.images)} images"
        if not sample.documents:
            return "no json entry"
        return None

    return check


def drop_documents(
    sample: reader.Sample,
    segments: Sequence[int],
    image_token_id: int | None,
    tokens_per_image: int,
    pad_id: int,
) -> reader.Sample:
    """``sample`` with the documents of ``segments`` turned into padding:
    their tokens, their images and their ``json`` entries removed.

    >>> ids = np.array([1, 9, 9, 5, 2, 9, 9, 0])
    >>> seg = np.array([1, 1, 1, 1, 1, 2, 2, 0])
    >>> sample = reader.Sample("k", "u", ids, seg, np.array([0, 1, 2, 3, 4, 0, 1, 0]),
    ...                        [b"a", b"b"], [{"segment": 1}, {"segment": 2}])
    >>> out = drop_documents(sample, [2], image_token_id=9, tokens_per_image=2, pad_id=0)
    >>> out.input_ids.tolist(), out.segment_ids.tolist(), out.images, out.documents
    ([1, 9, 9, 5, 2, 0, 0, 0], [1, 1, 1, 1, 1, 0, 0, 0], [b'a'], [{'segment': 1}])
    """
    gone = np.isin(sample.segment_ids, list(segments))
    slots = np.flatnonzero(sample.input_ids == image_token_id) if image_token_id is not None else []
    first_slots = slots[::tokens_per_image]  # an image's run of slots is never cut
    images = [image for image, slot in zip(sample.images, first_slots) if not gone[slot]]
    return dataclasses.replace(
        sample,
        input_ids=np.where(gone, pad_id, sample.input_ids).astype(sample.input_ids.dtype),
        segment_ids=np.where(gone, 0, sample.segment_ids).astype(sample.segment_ids.dtype),
        positions=np.where(gone, 0, sample.positions).astype(sample.positions.dtype),
        images=images,
        documents=[d for d in sample.documents if d.get("segment") not in set(segments)],
    )


@dataclasses.dataclass
class PackedDocument:
    """A PrefixLM document waiting for a row: its two halves, its images (decoded, in slot
    order), and where it was read, to read it again on resume."""

    source: int
    url: str
    key: str
    segment: int
    prefix: np.ndarray
    target: np.ndarray
    images: list[np.ndarray]

    @property
    def reference(self) -> list:
        return [self.source, self.url, self.key, self.segment, int(self.prefix.shape[0])]


def cut_document(
    source: int,
    sample: reader.Sample,
    segment: int,
    prefix: int,
    image_token_id: int | None,
    tokens_per_image: int,
    decode,
) -> PackedDocument:
    """Document ``segment`` of ``sample`` cut at ``prefix``, its images decoded by ``decode``."""
    ((start, end),) = [(a, b) for s, a, b in document_runs(sample.segment_ids) if s == segment]
    ids = np.asarray(sample.input_ids, np.int64)
    if image_token_id is None:
        first = count = 0
    else:
        first = int((ids[:start] == image_token_id).sum()) // tokens_per_image
        count = int((ids[start:end] == image_token_id).sum()) // tokens_per_image
    return PackedDocument(
        source,
        sample.url,
        sample.key,
        segment,
        ids[start : start + prefix],
        ids[start + prefix : end],
        [decode(image) for image in sample.images[first : first + count]],
    )


class PrefixLMPacker:
    """Rows of PrefixLM documents for an encoder row of ``encoder_len`` and a decoder row of
    ``decoder_len`` tokens (and at most ``max_images`` images): each row takes, in stream
    order, every waiting document that still fits both (first fit over the next
    ``window``); the documents it leaves wait for the next rows, the first of them taken
    first, so none waits for ever. ``more()`` gives the stream's next documents.

    >>> def doc(prefix, target):
    ...     return PackedDocument(0, "", "", 1, np.ones(prefix, int), np.ones(target, int), [])
    >>> stream = iter([[doc(6, 2)], [doc(5, 5)], [doc(3, 1), doc(1, 3)], [doc(2, 2)], [doc(4, 4)]])
    >>> packer = PrefixLMPacker(encoder_len=10, decoder_len=6, max_images=0, window=2)
    >>> rows = [packer.row(lambda: next(stream)) for _ in range(2)]
    >>> [[(len(d.prefix), len(d.target)) for d in row] for row in rows]
    [[(6, 2), (3, 1), (1, 3)], [(5, 5)]]
    >>> [(len(d.prefix), len(d.target)) for d in packer.waiting]  # carried over
    [(2, 2), (4, 4)]
    """

    def __init__(
        self, encoder_len: int, decoder_len: int, max_images: int, window: int = PACK_WINDOW
    ) -> None:
        self.encoder_len = encoder_len
        self.decoder_len = decoder_len
        self.max_images = max_images
        self.window = window
        self.waiting: list[PackedDocument] = []

    def row(self, more) -> list[PackedDocument]:
        row: list[PackedDocument] = []
        encoder = decoder = images = index = 0
        while encoder < self.encoder_len and decoder < self.decoder_len:
            while index >= len(self.waiting) and len(self.waiting) < self.window:
                self.waiting.extend(more())
            if index >= len(self.waiting):
                break
            doc = self.waiting[index]
            if (
                encoder + len(doc.prefix) <= self.encoder_len
                and decoder + len(doc.target) <= self.decoder_len
                and images + len(doc.images) <= self.max_images
            ):
                row.append(self.waiting.pop(index))
                encoder += len(doc.prefix)
                decoder += len(doc.target)
                images += len(doc.images)
            else:
                index += 1
        return row


class BatchStream:
    """The batches of one consumer, in numpy; the worker side of :class:`Loader`."""

    def __init__(
        self,
        sources: Sequence[Source],
        spec: DataSpec,
        config: DataConfig,
        consumer: int = 0,
        consumers: int = 1,
    ) -> None:
        self.spec = spec
        self.config = config
        self.consumer = consumer
        self.image_size = config.image_size or spec.image_size or (224, 224)
        check = sample_check(spec)
        streams = [
            ShardStream(
                split_shards(source.shards, consumer, consumers),
                seed=(config.seed, index, consumer),
                shuffle_buffer=config.shuffle_buffer,
                verify=config.verify,
                check=check,
                name=source.location,
            )
            for index, source in enumerate(sources)
        ]
        self.blend = Blend(
            streams, [s.weight for s in sources], config.weight_unit, [s.location for s in sources]
        )
        self.batches = 0
        self.undecodable = 0
        self.without_target = 0  # PrefixLM documents skipped: nothing to predict
        self.packer: PrefixLMPacker | None = None
        if config.packed:
            self.packer = PrefixLMPacker(
                config.encoder_len,  # type: ignore[arg-type]
                config.decoder_len,  # type: ignore[arg-type]
                packed_max_images(spec, config.encoder_len),  # type: ignore[arg-type]
            )
        self.samples_cut = 0  # samples whose documents were cut for the packer: seeds the cuts
        self.too_long = 0  # documents no cut fits into the packed rows
        self._pulled: list[tuple[int, reader.Sample]] = []

    def next_batch(self) -> tuple[dict[str, np.ndarray], list[tuple[int, reader.Sample]]]:
        """The next batch's arrays and the ``(source, sample)`` it holds (packed PrefixLM:
        the samples read for it)."""
        if self.packer is not None:
            return self._next_packed()
        picks: list[tuple[int, reader.Sample]] = []
        decoded = []
        while len(picks) < self.config.batch_size:
            source, sample = next(self.blend)
            if self.config.objective == "prefixlm":
                sample = self._with_targets(source, sample)
                if sample is None:
                    continue
            try:
                images = [load_image(data, self.image_size) for data in sample.images]
            except Exception as exc:  # a stored image that does not decode
                self.blend.retract(source, sample)
                self.undecodable += 1
                log.warning("%s: skipped sample %s: %s", sample.url, sample.key, _reason(exc))
                continue
            picks.append((source, sample))
            decoded.append(dataclasses.replace(sample, images=images))
        spec = self.spec
        batch = collate(
            decoded,
            seq_len=spec.seq_len,
            max_images=spec.max_images,
            image_size=self.image_size,
            image_mean=self.config.image_mean,
            image_std=self.config.image_std,
        )
        if self.config.objective == "vila":
            batch.update(
                vila_features(batch["input_ids"], batch["segment_ids"], spec.image_token_id)
            )
        else:
            rng = _seeded((self.config.seed, self.consumer, self.batches), 2)
            batch.update(
                prefixlm_features(
                    batch["input_ids"],
                    batch["segment_ids"],
                    spec.image_token_id,
                    spec.pad_id,
                    rng=rng,
                )
            )
        self.batches += 1
        return batch, picks

    def _next_packed(self) -> tuple[dict[str, np.ndarray], list[tuple[int, reader.Sample]]]:
        config, packer = self.config, self.packer
        assert packer is not None
        self._pulled = []
        rows = [packer.row(self._documents) for _ in range(config.batch_size)]
        batch = pack_prefixlm(
            [[(doc.prefix, doc.target) for doc in row] for row in rows],
            packer.encoder_len,
            packer.decoder_len,
            self.spec.pad_id,
        )
        batch["images"], batch["image_mask"] = stack_images(
            [[image for doc in row for image in doc.images] for row in rows],
            packer.max_images,
            self.image_size,
            config.image_mean,
            config.image_std,
        )
        self.batches += 1
        return batch, self._pulled

    def _documents(self) -> list[PackedDocument]:
        """The next sample's documents for the packer, each cut at a prefix length drawn
        within what fits the packed rows (:func:`~trainer.features.packable_bounds`) from a
        generator seeded with the run's seed, the consumer and the sample's number."""
        spec, packer = self.spec, self.packer
        assert packer is not None
        while True:
            source, sample = next(self.blend)
            sample = self._with_targets(source, sample)  # type: ignore[assignment]
            if sample is None:
                continue
            try:
                images = [load_image(data, self.image_size) for data in sample.images]
            except Exception as exc:  # a stored image that does not decode
                self.blend.retract(source, sample)
                self.undecodable += 1
                log.warning("%s: skipped sample %s: %s", sample.url, sample.key, _reason(exc))
                continue
            rng = _seeded((self.config.seed, self.consumer, self.samples_cut), 3)
            self.samples_cut += 1
            runs = document_runs(sample.segment_ids)
            bounds = packable_bounds(
                sample.input_ids,
                sample.segment_ids,
                spec.image_token_id,
                packer.encoder_len,
                packer.decoder_len,
            )
            fits = [(run, b) for run, b in zip(runs, bounds) if b is not None]
            self.too_long += len(runs) - len(fits)
            if not fits:
                self.blend.retract(source, sample)
                continue
            lengths = rng.integers([b[0] for _, b in fits], [b[1] + 1 for _, b in fits])
            self._pulled.append((source, sample))
            decoded = dataclasses.replace(sample, images=images)
            return [
                cut_document(
                    source,
                    decoded,
                    segment,
                    int(prefix),
                    spec.image_token_id,
                    spec.tokens_per_image,
                    _same_image,
                )
                for ((segment, _, _), _), prefix in zip(fits, lengths)
            ]

    def _reread_waiting(self, references: list[list]) -> list[PackedDocument]:
        """The packer's waiting documents, read again from their shards."""
        wanted: dict[str, set[str]] = {}
        for _, url, key, _, _ in references:
            wanted.setdefault(url, set()).add(key)
        found: dict[tuple[str, str], reader.Sample] = {}
        for url, keys in wanted.items():
            left = set(keys)
            try:
                for sample in reader.iter_samples(url, decode_images=False):
                    if sample.key in left:
                        found[(url, sample.key)] = sample
                        left.discard(sample.key)
                        if not left:
                            break
            except Exception as exc:
                log.warning("%s: cannot re-read the packer's documents (%s)", url, _reason(exc))
        lost = [key for _, url, key, _, _ in references if (url, key) not in found]
        if lost:
            log.warning("the packer's documents of %d sample(s) were not found again", len(lost))
        spec = self.spec
        return [
            cut_document(
                int(source),
                found[(url, key)],
                int(segment),
                int(prefix),
                spec.image_token_id,
                spec.tokens_per_image,
                lambda data: load_image(data, self.image_size),
            )
            for source, url, key, segment, prefix in references
            if (url, key) in found
        ]

    def _with_targets(self, source: int, sample: reader.Sample) -> reader.Sample | None:
        """``sample`` without the documents PrefixLM could not train on
        (:func:`~trainer.features.without_target`), counted; ``None`` where
        none is left (taken back from the blend, as an undecodable one)."""
        spec = self.spec
        skipped = without_target(sample.input_ids, sample.segment_ids, spec.image_token_id)
        if not skipped:
            return sample
        self.without_target += len(skipped)
        if len(skipped) == len(sample.documents):
            self.blend.retract(source, sample)
            return None
        return drop_documents(
            sample, skipped, spec.image_token_id, spec.tokens_per_image, spec.pad_id
        )

    def counters(self) -> dict[str, Any]:
        streams = [s.counters for s in self.blend.streams]
        return {
            "batches": self.batches,
            "samples": self.batches * self.config.batch_size,
            "shards_skipped": sum(c["shards_skipped"] for c in streams),
            "samples_skipped": sum(c["samples_skipped"] for c in streams) + self.undecodable,
            "documents_without_target": self.without_target,
            "documents_too_long": self.too_long,
            "sources": {
                name: dict(count) for name, count in zip(self.blend.names, self.blend.counts)
            },
        }

    def state_dict(self) -> dict[str, Any]:
        state = {
            "consumer": self.consumer,
            "batches": self.batches,
            "undecodable": self.undecodable,
            "without_target": self.without_target,
            "blend": self.blend.state_dict(),
            "counters": self.counters(),
        }
        if self.packer is not None:  # the carry-over: references, read again on resume
            state["packer"] = {
                "samples_cut": self.samples_cut,
                "too_long": self.too_long,
                "waiting": [doc.reference for doc in self.packer.waiting],
            }
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["consumer"] != self.consumer:
            raise ValueError(f"state of consumer {state['consumer']}, this is {self.consumer}")
        self.batches = int(state["batches"])
        self.undecodable = int(state["undecodable"])
        self.without_target = int(state.get("without_target", 0))
        self.blend.load_state_dict(state["blend"])
        if self.packer is not None:
            packer = state["packer"]
            self.samples_cut = int(packer["samples_cut"])
            self.too_long = int(packer["too_long"])
            self.packer.waiting = self._reread_waiting(packer["waiting"])

    def close(self) -> None:
        self.blend.close()


def _add_counters(total: dict[str, Any] | None, counters: dict[str, Any]) -> dict[str, Any]:
    """``total`` plus ``counters`` (a stream's): every number added, per source too."""
    if total is None:
        return json.loads(json.dumps(counters))
    out = dict(total)
    for key, value in counters.items():
        if key == "sources":
            out[key] = {
                name: {k: out[key].get(name, {}).get(k, 0) + v for k, v in count.items()}
                for name, count in value.items()
            }
        else:
            out[key] = out.get(key, 0) + value
    return out


def _same_image(image):
    return image


def packed_max_images(spec: DataSpec, encoder_len: int) -> int:
    """The image slots of a packed PrefixLM row: as many images as its encoder row holds."""
    return encoder_len // spec.tokens_per_image if spec.image_token_id is not None else 0


def _as_torch(batch: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    return {name: torch.from_numpy(array) for name, array in batch.items()}


def _pass_through(item):
    return item


class _WorkerBatches(torch.utils.data.IterableDataset):
    """The IterableDataset torch's DataLoader runs in each worker: worker
    ``w`` plays consumer ``slots[w]`` from its saved state."""

    def __init__(self, loader: "Loader", slots: list[int]) -> None:
        super().__init__()
        self.loader = loader
        self.slots = slots

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        worker = self.slots[info.id if info is not None else 0]
        stream = self.loader._batch_stream(worker)
        try:
            while True:
                batch, _ = stream.next_batch()
                yield _as_torch(batch), worker, stream.state_dict()
        finally:
            stream.close()


class Loader:
    """Endless batches of a blend for one rank of ``world_size``; see the module docstring."""

    def __init__(self, config: DataConfig, *, rank: int = 0, world_size: int = 1) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} of world_size {world_size}")
        self.config = config
        self.rank = rank
        self.world_size = world_size
        self.sources = [resolve_source(location, weight) for location, weight in config.sources]
        self.spec: DataSpec = check_blend(self.sources, config.weight_unit)
        if config.packed and config.objective != "prefixlm":
            raise ValueError(
                "encoder_len and decoder_len pack PrefixLM's streams: objective prefixlm"
            )
        size = config.image_size or self.spec.image_size or (224, 224)
        length, images = self.spec.seq_len, self.spec.max_images
        if config.packed:
            length = max(config.encoder_len, config.decoder_len)  # type: ignore[type-var]
            images = packed_max_images(self.spec, config.encoder_len)  # type: ignore[arg-type]
        need = batch_bytes(config.batch_size, length, images, size)
        if need > MAX_BATCH_BYTES:
            raise DataError(
                f"a batch of {config.batch_size} samples of {length} tokens and "
                f"{images} images of {size[0]}x{size[1]} takes "
                f"{need / 2**30:.1f} GiB, more than {MAX_BATCH_BYTES >> 30} GiB: "
                "lower the batch size or the image size"
            )
        self.workers = max(1, config.num_workers)
        self._states: list[dict[str, Any] | None] = [None] * self.workers
        self._batches = 0
        # the counters of the saved streams a resume at another world size took over
        self._carried: dict[str, Any] | None = None

    def _batch_stream(self, worker: int) -> BatchStream:
        stream = BatchStream(
            self.sources,
            self.spec,
            self.config,
            consumer=self.rank * self.workers + worker,
            consumers=self.world_size * self.workers,
        )
        state = self._states[worker]
        if state is not None:
            stream.load_state_dict(state)
        return stream

    def __iter__(self) -> Iterator[dict[str, Any]]:
        rotate = self._batches % self.workers  # the worker whose turn is next
        slots = [(rotate + w) % self.workers for w in range(self.workers)]
        if self.config.num_workers == 0:
            stream = self._batch_stream(0)
            try:
                while True:
                    batch, _ = stream.next_batch()
                    self._states[0] = stream.state_dict()
                    self._batches += 1
                    yield _as_torch(batch)
            finally:
                stream.close()
            return
        pin = self.config.pin_memory
        if pin is None:
            pin = torch.cuda.is_available()
        batches = torch.utils.data.DataLoader(
            _WorkerBatches(self, slots),  # type: ignore[arg-type]
            batch_size=None,
            collate_fn=_pass_through,
            num_workers=self.config.num_workers,
            pin_memory=pin,
            prefetch_factor=self.config.prefetch_factor,
        )
        for batch, worker, state in batches:
            self._states[worker] = state
            self._batches += 1
            yield batch

    @property
    def counters(self) -> dict[str, Any]:
        """What the batches handed out so far held: ``batches``, ``samples``,
        ``shards_skipped``, ``samples_skipped``, ``documents_without_target`` (PrefixLM
        documents skipped: nothing to predict), ``documents_too_long`` (packed PrefixLM: no
        cut fits the rows) and per source ``samples``, ``documents``, ``images``,
        ``tokens``."""
        total: dict[str, Any] = {
            "batches": 0,
            "samples": 0,
            "shards_skipped": 0,
            "samples_skipped": 0,
            "documents_without_target": 0,
            "documents_too_long": 0,
            "sources": {s.location: empty_counts() for s in self.sources},
        }
        for counters in [self._carried] + [s["counters"] for s in self._states if s is not None]:
            if counters is None:
                continue
            for key in ("batches", "samples", "shards_skipped", "samples_skipped"):
                total[key] += counters[key]
            for key in ("documents_without_target", "documents_too_long"):
                total[key] += counters.get(key, 0)
            for name, count in counters["sources"].items():
                for key, value in count.items():
                    total["sources"][name][key] += value
        return total

    def _identity(self) -> dict[str, Any]:
        c = self.config
        return {
            "sources": [[location, weight] for location, weight in c.sources],
            "weight_unit": c.weight_unit,
            "batch_size": c.batch_size,
            "objective": c.objective,
            "seed": c.seed,
            "shuffle_buffer": c.shuffle_buffer,
            "world_size": self.world_size,
            "rank": self.rank,
            "workers": self.workers,
            "encoder_len": c.encoder_len,
            "decoder_len": c.decoder_len,
        }

    def state_dict(self) -> dict[str, Any]:
        """The position of the stream after the batches handed out so far."""
        state = {
            "format": STATE_FORMAT,
            **self._identity(),
            "batches": self._batches,
            "worker_states": list(self._states),
        }
        if self._carried is not None:
            state["carried"] = self._carried
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue after the batches ``state`` had handed out. The run must
        read the same blend the same way; a difference raises ``ValueError``."""
        if state.get("format") != STATE_FORMAT:
            raise ValueError(f"not a loader state: format {state.get('format')!r}")
        for key, value in self._identity().items():
            if state.get(key) != value:  # a state from before packing has no encoder_len
                raise ValueError(
                    f"the loader state has {key} {state.get(key)}, this loader {value}"
                )
        self._batches = int(state["batches"])
        self._states = list(state["worker_states"])
        self._carried = state.get("carried")

    def load_state_dicts(self, states: Sequence[dict[str, Any]]) -> None:
        """Continue after a run of another world size (or number of workers), from the
        states of all its ranks, in rank order (a Distributed Checkpoint's resume).

        The saved streams split the builds' shards among their consumers (rank × worker),
        which this run's consumers do not share, so no stream can continue where a saved
        one stopped. Instead every consumer of this run starts a fresh pass of each build,
        the pass after the furthest any saved stream reached: no sample of the saved
        passes is read again in them, while what the saved streams had not read of their
        last pass yet (and held in their shuffle buffers and packers) is skipped, at most
        one pass of each build. The counters go on from the saved ranks' (this rank takes
        those of the saved ranks ``r`` with ``r mod world_size == rank``, so the ranks'
        counters still add up). The same states give the same batches. At the saved world
        size and workers this is :meth:`load_state_dict` of this rank's state: exact.
        """
        states = list(states)
        saved = len(states)
        for number, state in enumerate(states):
            if state.get("format") != STATE_FORMAT:
                raise ValueError(f"not a loader state: format {state.get('format')!r}")
            if state.get("rank") != number or state.get("world_size") != saved:
                raise ValueError(
                    f"give the states of all {saved} saved ranks in rank order: state {number} "
                    f"is rank {state.get('rank')} of {state.get('world_size')}"
                )
            for key, value in self._identity().items():
                if key not in ("world_size", "rank", "workers") and state.get(key) != value:
                    raise ValueError(
                        f"the loader state has {key} {state.get(key)}, this loader {value}"
                    )
        if saved == self.world_size and states[self.rank]["workers"] == self.workers:
            self.load_state_dict(states[self.rank])
            return
        passes = [0] * len(self.sources)
        for state in states:
            for worker_state in state["worker_states"]:
                if worker_state is None:
                    continue
                for index, stream in enumerate(worker_state["blend"]["streams"]):
                    passes[index] = max(passes[index], int(stream["pass"]) + 1)
        carried: dict[str, Any] | None = None
        for number, state in enumerate(states):
            if number % self.world_size != self.rank:
                continue
            for counters in [state.get("carried")] + [
                w["counters"] for w in state["worker_states"] if w is not None
            ]:
                if counters is not None:
                    carried = _add_counters(carried, counters)
        self._carried = carried
        self._batches = 0
        self._states = [None] * self.workers
        fresh = []
        for worker in range(self.workers):
            stream = self._batch_stream(worker)
            try:
                for shard_stream, number in zip(stream.blend.streams, passes):
                    shard_stream.start_pass(number)
                fresh.append(stream.state_dict())
            finally:
                stream.close()
        self._states = fresh  # type: ignore[assignment]

    def preview(
        self, count: int
    ) -> list[tuple[dict[str, np.ndarray], list[tuple[int, reader.Sample]]]]:
        """The first ``count`` batches of this rank's first worker, with the
        samples they hold, read in this process (``corpora train data``). Packed
        PrefixLM batches are shown as their samples would be unpacked (one sample a row)."""
        stream = BatchStream(
            self.sources,
            self.spec,
            dataclasses.replace(self.config, encoder_len=None, decoder_len=None),
            self.rank * self.workers,
            self.world_size * self.workers,
        )
        try:
            return [stream.next_batch() for _ in range(count)]
        finally:
            stream.close()

    def measure_mix(self, samples: int) -> dict[str, dict[str, int]]:
        """Per source, the samples, documents, images and tokens among the first
        ``samples`` this rank's workers give (shared evenly), without decoding."""
        totals = {s.location: empty_counts() for s in self.sources}
        for worker in range(self.workers):
            stream = BatchStream(
                self.sources,
                self.spec,
                self.config,
                self.rank * self.workers + worker,
                self.world_size * self.workers,
            )
            share = samples // self.workers + (worker < samples % self.workers)
            try:
                for _ in range(share):
                    next(stream.blend)
            finally:
                stream.close()
            for name, count in zip(stream.blend.names, stream.blend.counts):
                for key, value in count.items():
                    totals[name][key] += value
        return totals
