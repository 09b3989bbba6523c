"""Collate packed samples into batches of static shapes.

Every batch has the same shapes, whatever its samples hold, so an XLA device
compiles once: ``B`` samples, ``L = seq_len``, ``M = max_images`` (the most
images a sample of the blend's builds holds, from their manifests)::

    input_ids, segment_ids, positions   int64    [B, L]
    images                              float32  [B, M, 3, H, W]  zeros in empty slots
    image_mask                          bool     [B, M]           True where a real image is

    >>> import numpy as np
    >>> from types import SimpleNamespace
    >>> row = SimpleNamespace(
    ...     input_ids=np.array([1, 9, 9, 5, 2, 0], np.int32),
    ...     segment_ids=np.array([1, 1, 1, 1, 1, 0], np.int32),
    ...     positions=np.array([0, 1, 2, 3, 4, 0], np.int32),
    ...     images=[np.full((4, 4, 3), 255, np.uint8)],
    ... )
    >>> batch = collate([row, row], seq_len=6, max_images=2, image_size=(4, 4),
    ...                 image_mean=(0.5, 0.5, 0.5), image_std=(0.5, 0.5, 0.5))
    >>> shapes = {name: (array.dtype.name, array.shape) for name, array in batch.items()}
    >>> shapes  # doctest: +NORMALIZE_WHITESPACE
    {'input_ids': ('int64', (2, 6)), 'segment_ids': ('int64', (2, 6)),
     'positions': ('int64', (2, 6)), 'images': ('float32', (2, 2, 3, 4, 4)),
     'image_mask': ('bool', (2, 2))}
    >>> batch["image_mask"].tolist()
    [[True, False], [True, False]]
    >>> float(batch["images"][0, 0].max()), float(batch["images"][0, 1].max())  # white; empty
    (1.0, 0.0)

Images are decoded, resized to cover ``image_size`` and centre-cropped (the
CLIP preprocessing; a build's images are already square by default, so this
is a plain resize), then normalised with the vision model's mean and std.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from corpora.record import open_image
from trainer.config import CLIP_MEAN, CLIP_STD

TEXT_ARRAYS = ("input_ids", "segment_ids", "positions")
# The host memory one batch may take, checked before the first (a batch size
# or image size typed a few digits too long would otherwise take the machine).
MAX_BATCH_BYTES = 8 << 30


def batch_bytes(batch_size: int, seq_len: int, max_images: int, size: tuple[int, int]) -> int:
    """The host memory of one batch, at most: a dozen ``int64 [seq_len]``
    arrays a sample (the text and the objective's features) and its images
    in float32.

    >>> batch_bytes(4, 2048, 1, (336, 336)) / 2**20
    5.91796875
    """
    height, width = size
    return batch_size * (12 * seq_len * 8 + max_images * 3 * height * width * 4)


def load_image(data: bytes, size: tuple[int, int]) -> np.ndarray:
    """Decode an encoded image into uint8 ``[H, W, 3]`` RGB of ``size = (H, W)``:
    scaled to cover it, bicubic, centre-cropped.

    >>> import io
    >>> from PIL import Image
    >>> buffer = io.BytesIO()
    >>> Image.new("RGB", (60, 30), (200, 10, 10)).save(buffer, "JPEG")
    >>> load_image(buffer.getvalue(), (8, 8)).shape
    (8, 8, 3)
    """
    from PIL import Image

    height, width = size
    image = open_image(data)
    scale = max(height / image.height, width / image.width)
    # JPEG decodes straight to the smallest DCT scale that still covers the target:
    # most of the cost of decoding a large image goes away.
    image.draft(
        "RGB", (max(width, int(image.width * scale)), max(height, int(image.height * scale)))
    )
    image = image.convert("RGB")
    scale = max(height / image.height, width / image.width)
    crop_w, crop_h = width / scale, height / scale
    left, top = (image.width - crop_w) / 2, (image.height - crop_h) / 2
    box = (left, top, left + crop_w, top + crop_h)
    if image.size != (width, height) or box != (0, 0, width, height):
        image = image.resize((width, height), Image.Resampling.BICUBIC, box=box)
    return np.asarray(image, dtype=np.uint8)


def normaliser(mean: Sequence[float], std: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """``(scale, offset)`` per channel such that ``pixel * scale + offset ==
    (pixel / 255 - mean) / std``."""
    mean_a = np.asarray(mean, np.float32)
    std_a = np.asarray(std, np.float32)
    return 1.0 / (255.0 * std_a), -mean_a / std_a


def collate(
    samples: Sequence[Any],
    *,
    seq_len: int,
    max_images: int,
    image_size: tuple[int, int],
    image_mean: Sequence[float] = CLIP_MEAN,
    image_std: Sequence[float] = CLIP_STD,
) -> dict[str, np.ndarray]:
    """Stack samples (anything with ``input_ids``, ``segment_ids``,
    ``positions`` and ``images``: encoded bytes or uint8 ``[H, W, 3]`` arrays,
    in slot order) into one batch of static shapes. Raises ``ValueError`` for
    a sample of another length or with more than ``max_images`` images."""
    batch = {name: np.zeros((len(samples), seq_len), np.int64) for name in TEXT_ARRAYS}
    for row, sample in enumerate(samples):
        for name in TEXT_ARRAYS:
            array = getattr(sample, name)
            if array.shape != (seq_len,):
                raise ValueError(
                    f"{name} has shape {array.shape}, the blend's seq_len is {seq_len}"
                )
            batch[name][row] = array
    batch["images"], batch["image_mask"] = stack_images(
        [sample.images for sample in samples], max_images, image_size, image_mean, image_std
    )
    return batch


def stack_images(
    rows: Sequence[Sequence[Any]],
    max_images: int,
    image_size: tuple[int, int],
    image_mean: Sequence[float] = CLIP_MEAN,
    image_std: Sequence[float] = CLIP_STD,
) -> tuple[np.ndarray, np.ndarray]:
    """The ``images`` float32 ``[B, M, 3, H, W]`` (normalised, zeros in empty slots) and
    ``image_mask`` bool ``[B, M]`` of rows that each hold a list of images (encoded bytes
    or uint8 ``[H, W, 3]`` arrays, in slot order). Raises ``ValueError`` for a row of more
    than ``max_images`` images."""
    count = len(rows)
    height, width = image_size
    images = np.zeros((count, max_images, 3, height, width), np.float32)
    mask = np.zeros((count, max_images), bool)
    scale, offset = normaliser(image_mean, image_std)
    for row, row_images in enumerate(rows):
        if len(row_images) > max_images:
            raise ValueError(f"a sample holds {len(row_images)} images, max_images is {max_images}")
        for slot, image in enumerate(row_images):
            pixels = load_image(image, image_size) if isinstance(image, bytes) else image
            if pixels.shape != (height, width, 3):
                raise ValueError(f"image of shape {pixels.shape}, expected {(height, width, 3)}")
            for channel in range(3):  # channels-first while normalising: one pass per channel
                np.multiply(pixels[..., channel], scale[channel], out=images[row, slot, channel])
                images[row, slot, channel] += offset[channel]
            mask[row, slot] = True
    return images, mask
