"""Image features into image slots, shared by both models.

The images of a packed row map, in order, onto the runs of ``image_token_id``
in its token ids: slot token ``k`` of the row (counting image tokens only)
takes patch ``k % tokens_per_image`` of image ``k // tokens_per_image``.

    >>> import torch
    >>> ids = torch.tensor([[7, 9, 9, 8, 9, 9]])          # two images of 2 tokens, image id 9
    >>> text = torch.zeros(1, 6, 1)
    >>> features = torch.tensor([[[[1.0], [2.0]], [[3.0], [4.0]]]])  # [B, M, T, D]
    >>> place_images(text, ids, 9, features)[0, :, 0]
    tensor([0., 1., 2., 0., 3., 4.])
"""

from __future__ import annotations

from typing import Callable

import torch


def image_features(
    encode: Callable[[torch.Tensor], torch.Tensor],
    images: torch.Tensor,
    image_mask: torch.Tensor,
    tokens_per_image: int,
    width: int,
    static_shapes: bool,
) -> torch.Tensor:
    """``encode`` ``[N, 3, H, W] → [N, T, D]`` over the batch's images: ``[B, M, T, D]``.

    With ``static_shapes`` (XLA) every slot is encoded, empty ones too, so the
    graph never changes; elsewhere only the real images are, and empty slots
    hold zeros.
    """
    batch, slots = image_mask.shape
    if static_shapes:
        return encode(images.flatten(0, 1)).unflatten(0, (batch, slots))
    flat_mask = image_mask.flatten()
    where = flat_mask.nonzero().squeeze(1)
    if where.numel() == 0:
        # No image in the batch. Encoders break on an empty batch (open_clip's ViT reshapes by
        # it), and DDP wants every trainable weight in the graph: encode one empty slot, keep
        # none of it.
        unused = encode(images.flatten(0, 1)[:1])
        return unused.new_zeros(batch, slots, tokens_per_image, width) + 0.0 * unused.sum()
    real = encode(images.flatten(0, 1)[where])
    placed = real.new_zeros(batch * slots, tokens_per_image, width).index_put((where,), real)
    return placed.unflatten(0, (batch, slots))


def place_images(
    embeds: torch.Tensor, input_ids: torch.Tensor, image_token_id: int, features: torch.Tensor
) -> torch.Tensor:
    """``embeds`` ``[B, L, D]`` with each image slot replaced by its patch feature."""
    batch, slots, per_image, width = features.shape
    if slots == 0:
        return embeds
    is_image = input_ids == image_token_id
    order = (is_image.long().cumsum(-1) - 1).clamp(0, slots * per_image - 1)
    gathered = torch.gather(
        features.reshape(batch, slots * per_image, width).to(embeds.dtype),
        1,
        order[..., None].expand(-1, -1, width),
    )
    return torch.where(is_image[..., None], gathered, embeds)


def check_slots(
    batch: dict[str, torch.Tensor], image_token_id: int, tokens_per_image: int, key: str
):
    """One line naming the row when its image slots do not match its images, else ``None``.

    The loop runs this on the first batch: a build whose ``tokens_per_image``
    differs from the model's would otherwise put patches in the wrong places.
    """
    slots = (batch[key] == image_token_id).sum(-1)
    images = batch["image_mask"].sum(-1)
    for row, (have, count) in enumerate(zip(slots.tolist(), images.tolist())):
        if have != count * tokens_per_image:
            return (
                f"row {row} of the first batch has {have} image-slot tokens for {count} images "
                f"of {tokens_per_image} tokens"
            )
    mask = batch["image_mask"]
    if mask.shape[1] and bool((mask[:, 1:] & ~mask[:, :-1]).any()):
        return "image_mask has an empty slot before a real image; images must fill slots in order"
    return None
