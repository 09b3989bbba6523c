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
import logging
from typing import Any, Iterator, Sequence

import numpy as np

from corpora import reader
from corpora.config.extras import missing_extra

try:
    import torch
except ImportError as exc:  # fail at import, naming the fix, not inside a worker
    raise missing_extra("train", "the trainer's loader", exc) from None

from trainer.batch import MAX_BATCH_BYTES, batch_bytes, collate, load_image
from trainer.blend import (
    Blend,
    DataSpec,
    Source,
    check_blend,
    empty_counts,
    resolve_source,
)
from trainer.config import DataConfig, data_config  # noqa: F401  (the loader's settings)
from trainer.features import prefixlm_features, vila_features, without_target
from trainer.stream import DataError, ShardStream, _reason, _seeded, split_shards

log = logging.getLogger("trainer.data")

STATE_FORMAT = "corpora-loader/1"


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

    def next_batch(self) -> tuple[dict[str, np.ndarray], list[tuple[int, reader.Sample]]]:
        """The next batch's arrays and the ``(source, sample)`` it holds."""
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
            "sources": {
                name: dict(count) for name, count in zip(self.blend.names, self.blend.counts)
            },
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            "consumer": self.consumer,
            "batches": self.batches,
            "undecodable": self.undecodable,
            "without_target": self.without_target,
            "blend": self.blend.state_dict(),
            "counters": self.counters(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["consumer"] != self.consumer:
            raise ValueError(f"state of consumer {state['consumer']}, this is {self.consumer}")
        self.batches = int(state["batches"])
        self.undecodable = int(state["undecodable"])
        self.without_target = int(state.get("without_target", 0))
        self.blend.load_state_dict(state["blend"])

    def close(self) -> None:
        self.blend.close()


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
        size = config.image_size or self.spec.image_size or (224, 224)
        need = batch_bytes(config.batch_size, self.spec.seq_len, self.spec.max_images, size)
        if need > MAX_BATCH_BYTES:
            raise DataError(
                f"a batch of {config.batch_size} samples of {self.spec.seq_len} tokens and "
                f"{self.spec.max_images} images of {size[0]}x{size[1]} takes "
                f"{need / 2**30:.1f} GiB, more than {MAX_BATCH_BYTES >> 30} GiB: "
                "lower the batch size or the image size"
            )
        self.workers = max(1, config.num_workers)
        self._states: list[dict[str, Any] | None] = [None] * self.workers
        self._batches = 0

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
        documents skipped: nothing to predict) and per source ``samples``, ``documents``,
        ``images``, ``tokens``."""
        total: dict[str, Any] = {
            "batches": 0,
            "samples": 0,
            "shards_skipped": 0,
            "samples_skipped": 0,
            "documents_without_target": 0,
            "sources": {s.location: empty_counts() for s in self.sources},
        }
        for state in self._states:
            if state is None:
                continue
            counters = state["counters"]
            for key in ("batches", "samples", "shards_skipped", "samples_skipped"):
                total[key] += counters[key]
            total["documents_without_target"] += counters.get("documents_without_target", 0)
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
        }

    def state_dict(self) -> dict[str, Any]:
        """The position of the stream after the batches handed out so far."""
        return {
            "format": STATE_FORMAT,
            **self._identity(),
            "batches": self._batches,
            "worker_states": list(self._states),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue after the batches ``state`` had handed out. The run must
        read the same blend the same way; a difference raises ``ValueError``."""
        if state.get("format") != STATE_FORMAT:
            raise ValueError(f"not a loader state: format {state.get('format')!r}")
        for key, value in self._identity().items():
            if state[key] != value:
                raise ValueError(f"the loader state has {key} {state[key]}, this loader {value}")
        self._batches = int(state["batches"])
        self._states = list(state["worker_states"])

    def preview(
        self, count: int
    ) -> list[tuple[dict[str, np.ndarray], list[tuple[int, reader.Sample]]]]:
        """The first ``count`` batches of this rank's first worker, with the
        samples they hold, read in this process (``corpora train data``)."""
        stream = BatchStream(
            self.sources,
            self.spec,
            self.config,
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
