"""Batches that follow the trainer contract (docs/trainer.md), made for the model tests.

``vila_batch`` and ``prefixlm_batch`` build one batch from documents written
as lists of items: an int is a text token, ``IMAGE`` is one image (its
``tokens_per_image`` slots). The features come from ``trainer.features``, as
the loader's do; the images are random, one seed per row and slot.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from trainer import features

IMAGE = "image"


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
    for row, documents in enumerate(rows):
        start = 0
        for number, document in enumerate(documents, 1):
            ids = _expand(document, tokens_per_image, image_token_id)
            end = start + len(ids)
            if end > seq_len:
                raise ValueError(f"row {row} is longer than seq_len {seq_len}")
            input_ids[row, start:end] = ids
            segment_ids[row, start:end] = number
            start = end
    return input_ids, segment_ids, features.document_positions(segment_ids)


def _tensors(arrays: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    return {name: torch.from_numpy(np.ascontiguousarray(array)) for name, array in arrays.items()}


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
    batch = _tensors(
        {
            "input_ids": input_ids,
            "segment_ids": segment_ids,
            "positions": positions,
            **features.vila_features(input_ids, segment_ids, image_token_id),
        }
    )
    batch.update(images=images, image_mask=image_mask)
    return batch


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
    """``prefix_texts[row][document]``: how many text tokens after its last image (after its
    start, for a text-only document) a document's prefix holds."""
    input_ids, segment_ids, positions = pack_rows(
        rows, seq_len, tokens_per_image, image_token_id, pad_id
    )
    lengths = []
    for documents, texts in zip(rows, prefix_texts):
        row = []
        for document, text in zip(documents, texts):
            last = max((i for i, item in enumerate(document) if item == IMAGE), default=-1)
            before = _expand(document[: last + 1], tokens_per_image, image_token_id)
            row.append(len(before) + text)
        lengths.append(row)
    cut = features.prefixlm_features(
        input_ids, segment_ids, image_token_id, pad_id, prefix_lengths=lengths
    )
    images, image_mask = _images(rows, max_images, image_size, seed)
    batch = _tensors(
        {"input_ids": input_ids, "segment_ids": segment_ids, "positions": positions, **cut}
    )
    batch.update(images=images, image_mask=image_mask)
    return batch


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


class GlobalRows:
    """A stream of ``count`` global batches taken from ``loader`` (one process's), each split
    across ranks by rows: rank ``r`` of ``world_size`` takes its ``1 / world_size`` of every
    batch. Its position is the number of global batches taken, the same on every rank, so a
    run resumes from it at another world size (``load_state_dicts``)."""

    def __init__(self, loader, rank: int, world_size: int, count: int):
        self.spec = loader.spec
        stream = iter(loader)
        self.batches = [next(stream) for _ in range(count)]
        per_rank = self.batches[0]["segment_ids"].shape[0] // world_size
        self.rows = slice(rank * per_rank, (rank + 1) * per_rank)
        self.taken = 0

    def __iter__(self):
        while self.taken < len(self.batches):
            batch = self.batches[self.taken]
            self.taken += 1
            yield {name: value[self.rows] for name, value in batch.items()}

    def state_dict(self):
        return {"global_batches": self.taken}

    def load_state_dict(self, state):
        self.taken = state["global_batches"]

    def load_state_dicts(self, states):
        assert len({state["global_batches"] for state in states}) == 1, states
        self.load_state_dict(states[0])
