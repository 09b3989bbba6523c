"""Batches that follow the trainer contract (docs/trainer.md), made for the model tests.

``vila_batch`` and ``prefixlm_batch`` build one batch from documents written
as lists of items: an int is a text token, ``IMAGE`` is one image (its
``tokens_per_image`` slots). ``ShardBatches`` reads a build made by
``corpora build`` through ``corpora.reader`` and yields such batches
endlessly, with the ``Loader`` interface the loop uses (``spec``,
``state_dict``/``load_state_dict``, ``counters``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterator, Sequence

import numpy as np
import torch

IMAGE = "image"
IGNORE = -100


@dataclasses.dataclass(frozen=True)
class Spec:
    """The fields of the data side's ``DataSpec`` the models read."""

    seq_len: int
    pad_id: int
    image_token_id: int | None
    tokens_per_image: int
    image_size: tuple[int, int] | None
    max_images: int
    tokenizer_sha256: str
    vocab_size: int | None


def _expand(document: Sequence, tokens_per_image: int, image_token_id: int) -> list[int]:
    ids: list[int] = []
    for item in document:
        ids += [image_token_id] * tokens_per_image if item == IMAGE else [int(item)]
    return ids


def _images(rows, max_images, image_size, seed) -> tuple[torch.Tensor, torch.Tensor]:
    """Random images; the one in slot ``s`` of row ``r`` depends on ``(seed, r, s)`` only."""
    images = torch.zeros(len(rows), max_images, 3, image_size, image_size)
    mask = torch.zeros(len(rows), max_images, dtype=torch.bool)
    for row, documents in enumerate(rows):
        count = sum(item == IMAGE for document in documents for item in document)
        if count > max_images:
            raise ValueError(f"row {row} holds {count} images, max_images is {max_images}")
        for slot in range(count):
            generator = torch.Generator().manual_seed(seed * 10_000 + row * 100 + slot)
            images[row, slot] = torch.randn(3, image_size, image_size, generator=generator)
        mask[row, :count] = True
    return images, mask


def pack_rows(rows, seq_len, tokens_per_image, image_token_id, pad_id):
    """input_ids, segment_ids, positions ``[B, L]`` of packed documents."""
    shape = (len(rows), seq_len)
    input_ids = np.full(shape, pad_id, dtype=np.int64)
    segment_ids = np.zeros(shape, dtype=np.int64)
    positions = np.zeros(shape, dtype=np.int64)
    for row, documents in enumerate(rows):
        start = 0
        for number, document in enumerate(documents, 1):
            ids = _expand(document, tokens_per_image, image_token_id)
            end = start + len(ids)
            if end > seq_len:
                raise ValueError(f"row {row} is longer than seq_len {seq_len}")
            input_ids[row, start:end] = ids
            segment_ids[row, start:end] = number
            positions[row, start:end] = np.arange(len(ids))
            start = end
    return input_ids, segment_ids, positions


def vila_labels(input_ids, segment_ids, image_token_id):
    """The next text token of the same document, else -100 (as LLaVA: no image targets)."""
    labels = np.full_like(input_ids, IGNORE)
    following = input_ids[:, 1:]
    same = (segment_ids[:, 1:] == segment_ids[:, :-1]) & (segment_ids[:, :-1] > 0)
    keep = same & (following != image_token_id)
    labels[:, :-1] = np.where(keep, following, IGNORE)
    return labels


def vila_batch(
    rows: Sequence[Sequence[Sequence]],
    *,
    seq_len: int,
    tokens_per_image: int,
    image_token_id: int,
    pad_id: int = 0,
    max_images: int = 2,
    image_size: int = 32,
    seed: int = 0,
) -> dict[str, torch.Tensor]:
    input_ids, segment_ids, positions = pack_rows(
        rows, seq_len, tokens_per_image, image_token_id, pad_id
    )
    images, image_mask = _images(rows, max_images, image_size, seed)
    return {
        "input_ids": torch.from_numpy(input_ids),
        "segment_ids": torch.from_numpy(segment_ids),
        "positions": torch.from_numpy(positions),
        "images": images,
        "image_mask": image_mask,
        "labels": torch.from_numpy(vila_labels(input_ids, segment_ids, image_token_id)),
        "position_ids": torch.from_numpy(positions.copy()),
    }


def split_prefix(document: Sequence, prefix_text: int) -> tuple[list, list[int]]:
    """All the document's images and its first ``prefix_text`` text tokens; the rest."""
    images = [item for item in document if item == IMAGE]
    text = [int(item) for item in document if item != IMAGE]
    return images + text[:prefix_text], text[prefix_text:]


def prefixlm_batch(
    rows: Sequence[Sequence[Sequence]],
    prefix_texts: Sequence[Sequence[int]],
    *,
    seq_len: int,
    tokens_per_image: int,
    image_token_id: int,
    pad_id: int = 0,
    max_images: int = 2,
    image_size: int = 64,
    seed: int = 0,
) -> dict[str, torch.Tensor]:
    """``prefix_texts[row][document]``: how many of the document's text tokens go to the encoder."""
    input_ids, segment_ids, positions = pack_rows(
        rows, seq_len, tokens_per_image, image_token_id, pad_id
    )
    shape = (len(rows), seq_len)
    arrays = {
        name: np.full(shape, pad_id if name.endswith("input_ids") else 0, dtype=np.int64)
        for name in (
            "encoder_input_ids",
            "encoder_segment_ids",
            "encoder_positions",
            "decoder_input_ids",
            "decoder_target_ids",
            "decoder_segment_ids",
            "decoder_positions",
        )
    }
    arrays["decoder_target_ids"][:] = pad_id
    weights = np.zeros(shape, dtype=np.float32)
    for row, documents in enumerate(rows):
        encoder_at = decoder_at = 0
        for number, (document, prefix_text) in enumerate(zip(documents, prefix_texts[row]), 1):
            prefix, rest = split_prefix(document, prefix_text)
            prefix_ids = _expand(prefix, tokens_per_image, image_token_id)
            end = encoder_at + len(prefix_ids)
            arrays["encoder_input_ids"][row, encoder_at:end] = prefix_ids
            arrays["encoder_segment_ids"][row, encoder_at:end] = number
            arrays["encoder_positions"][row, encoder_at:end] = np.arange(len(prefix_ids))
            encoder_at = end
            end = decoder_at + len(rest)
            arrays["decoder_target_ids"][row, decoder_at:end] = rest
            arrays["decoder_input_ids"][row, decoder_at:end] = [pad_id] + rest[:-1]
            arrays["decoder_segment_ids"][row, decoder_at:end] = number
            arrays["decoder_positions"][row, decoder_at:end] = np.arange(len(rest))
            weights[row, decoder_at:end] = 1.0
            decoder_at = end
    images, image_mask = _images(rows, max_images, image_size, seed)
    batch = {name: torch.from_numpy(array) for name, array in arrays.items()}
    batch.update(
        input_ids=torch.from_numpy(input_ids),
        segment_ids=torch.from_numpy(segment_ids),
        positions=torch.from_numpy(positions),
        images=images,
        image_mask=image_mask,
        decoder_loss_weights=torch.from_numpy(weights),
    )
    return batch


def documents_of(sample, image_token_id: int, tokens_per_image: int) -> list[list]:
    """A packed sample of a build back into documents of items."""
    documents: list[list] = []
    for number in range(1, int(sample.segment_ids.max(initial=0)) + 1):
        ids = sample.input_ids[sample.segment_ids == number].tolist()
        items: list = []
        at = 0
        while at < len(ids):
            if ids[at] == image_token_id:
                items.append(IMAGE)
                at += tokens_per_image
            else:
                items.append(ids[at])
                at += 1
        documents.append(items)
    return documents


class ShardBatches:
    """Contract batches from a build's shards, endlessly, in a seeded order per pass.

    Small builds only (the samples are held in memory). The prefix of a
    PrefixLM document is half its text, at least one token, drawn from nothing
    random, so every pass gives the same batches.
    """

    def __init__(
        self,
        location: str,
        *,
        batch_size: int,
        objective: str,
        image_size: int,
        image_mean: Sequence[float],
        image_std: Sequence[float],
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
    ):
        from corpora.reader import iter_samples, load_manifest, shard_urls

        manifest = load_manifest(location)
        samples = list(iter_samples(shard_urls(location, manifest)))
        self.samples = samples[rank::world_size]
        self.spec = Spec(
            seq_len=manifest["seq_len"],
            pad_id=manifest["pad_id"],
            image_token_id=manifest["image_token_id"],
            tokens_per_image=manifest["tokens_per_image"],
            image_size=(manifest["image_size"], manifest["image_size"]),
            max_images=manifest["max_images_per_sample"],
            tokenizer_sha256=manifest["tokenizer"]["sha256"],
            vocab_size=manifest["vocab_size"],
        )
        self.batch_size, self.objective, self.seed = batch_size, objective, seed
        self.image_size = image_size
        self.mean = torch.tensor(image_mean).view(3, 1, 1)
        self.std = torch.tensor(image_std).view(3, 1, 1)
        self.batches = 0
        self.counters = {"samples": 0, "shards_skipped": 0}

    def state_dict(self) -> dict[str, Any]:
        return {"batches": self.batches}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.batches = state["batches"]

    def _order(self, epoch: int) -> list[int]:
        return np.random.default_rng([self.seed, epoch]).permutation(len(self.samples)).tolist()

    def _image(self, image) -> torch.Tensor:
        image = image.convert("RGB").resize((self.image_size, self.image_size))
        array = torch.from_numpy(np.asarray(image, dtype=np.float32) / 255.0).permute(2, 0, 1)
        return (array - self.mean) / self.std

    def _batch(self, samples) -> dict[str, torch.Tensor]:
        spec = self.spec
        rows = [documents_of(s, spec.image_token_id, spec.tokens_per_image) for s in samples]
        common = dict(
            seq_len=spec.seq_len,
            tokens_per_image=spec.tokens_per_image,
            image_token_id=spec.image_token_id,
            pad_id=spec.pad_id,
            max_images=spec.max_images,
            image_size=self.image_size,
        )
        if self.objective == "vila":
            batch = vila_batch(rows, **common)
        else:
            prefixes = [
                [max(1, sum(item != IMAGE for item in document) // 2) for document in documents]
                for documents in rows
            ]
            batch = prefixlm_batch(rows, prefixes, **common)
        for row, sample in enumerate(samples):
            for slot, image in enumerate(sample.images):
                batch["images"][row, slot] = self._image(image)
        return batch

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        while True:
            at = self.batches * self.batch_size
            epoch, offset = divmod(at, len(self.samples))
            order = self._order(epoch) + self._order(epoch + 1)
            picked = [self.samples[i] for i in order[offset : offset + self.batch_size]]
            self.batches += 1
            self.counters["samples"] += len(picked)
            yield self._batch(picked)


class Crashing:
    """A loader that fails after ``after`` batches, as a stream whose node went away would."""

    def __init__(self, loader, after: int):
        self.loader, self.after = loader, after
        self.spec = loader.spec

    def state_dict(self):
        return self.loader.state_dict()

    def load_state_dict(self, state):
        self.loader.load_state_dict(state)

    def __iter__(self):
        for taken, batch in enumerate(self.loader):
            if taken == self.after:
                raise RuntimeError("the data node went away")
            yield batch
