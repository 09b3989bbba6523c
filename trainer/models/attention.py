"""Attention that stays inside each packed document, built on the device from segment ids.

A packed row holds several documents; ``segment_ids`` numbers them 1, 2, … and
marks padding 0. Two masks follow from it (True = may attend), the same ones
``trainer.features`` derives in numpy:

    >>> import torch
    >>> segment_ids = torch.tensor([[1, 1, 2, 2, 0]])
    >>> document_causal_mask(segment_ids)[0].int()
    tensor([[1, 0, 0, 0, 0],
            [1, 1, 0, 0, 0],
            [0, 0, 1, 0, 0],
            [0, 0, 1, 1, 0],
            [0, 0, 0, 0, 0]], dtype=torch.int32)
    >>> document_mask(segment_ids, torch.tensor([[1, 2, 2, 0, 0]]))[0].int()
    tensor([[1, 0, 0, 0, 0],
            [1, 0, 0, 0, 0],
            [0, 1, 1, 0, 0],
            [0, 1, 1, 0, 0],
            [0, 0, 0, 0, 0]], dtype=torch.int32)

A query with no key at all (padding, or a decoder token whose document has no
prefix) would make softmax divide by zero; :func:`attend` lets such a row see
every key and zeroes its output instead, so nothing leaks and nothing is NaN.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def document_mask(q_segment_ids: torch.Tensor, k_segment_ids: torch.Tensor) -> torch.Tensor:
    """bool ``[..., Lq, Lk]``: query and key in the same document, neither padding."""
    same = q_segment_ids[..., :, None] == k_segment_ids[..., None, :]
    return same & (q_segment_ids[..., :, None] > 0) & (k_segment_ids[..., None, :] > 0)


def document_causal_mask(segment_ids: torch.Tensor) -> torch.Tensor:
    """bool ``[..., L, L]``: same document, key position <= query position, never padding."""
    length = segment_ids.shape[-1]
    causal = torch.ones(length, length, dtype=torch.bool, device=segment_ids.device).tril()
    return document_mask(segment_ids, segment_ids) & causal


def attend(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """Scaled dot-product attention, ``[B, H, L, D]`` tensors and a bool ``[B, Lq, Lk]`` mask."""
    has_key = mask.any(-1, keepdim=True)
    mask = (mask | ~has_key)[:, None]
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask)
    return out * has_key[:, None].to(out.dtype)
