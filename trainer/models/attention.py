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

Those dense masks hold ``L × L`` elements, and with a mask PyTorch's SDPA
never takes its fused (flash) kernel. Two ways here allocate nothing of that
size; the dense masks stay as the reference they are tested against:

- **varlen** (every device but XLA): the row is cut into its documents
  (:func:`segment_runs`, one host read of the segment ids per forward) and
  each document attends alone through SDPA without a mask, ``is_causal`` for
  causal attention, which takes the fused kernels (flash on CUDA and on the
  CPU). It is the variable-length attention of flash-attention's
  ``cu_seqlens``, one call per document:

    >>> segment_runs(torch.tensor([[1, 1, 2, 2, 0], [1, 1, 1, 1, 1]]))
    [[(1, 0, 2), (2, 2, 4), (0, 4, 5)], [(1, 0, 5)]]

- **flex** (CUDA): FlexAttention with a block mask built from the segment ids
  block by block (:func:`document_block_mask`): ``[B, L/128, L/128]`` block
  flags, never the elementwise mask; the kernel skips the blocks no query of
  a document needs. Its backward needs CUDA (PyTorch has none on the CPU).
"""

from __future__ import annotations

import warnings
from typing import Callable

import torch
import torch.nn.functional as F

FLEX_BLOCK = 128  # FlexAttention's default block size: the mask is kept per 128 x 128 tile

Runs = list[list[tuple[int, int, int]]]  # per row: (segment, start, end) of each run


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


def segment_runs(segment_ids: torch.Tensor) -> Runs:
    """Per row of ``[B, L]`` segment ids: ``(segment, start, end)`` of every run of equal
    ids, padding (segment 0) included, in order."""
    runs: Runs = []
    for row in segment_ids.tolist():
        found, start = [], 0
        for index in range(1, len(row) + 1):
            if index == len(row) or row[index] != row[start]:
                found.append((row[start], start, index))
                start = index
        runs.append(found)
    return runs


def varlen_attend(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    q_runs: Runs,
    k_runs: Runs | None = None,
    *,
    causal: bool,
    padding_sees_itself: bool = False,
    scale: float | None = None,
) -> torch.Tensor:
    """Each document's queries attend to the same document's keys, one SDPA call per document.

    ``query`` ``[B, H, Lq, D]``, ``key`` and ``value`` ``[B, Hkv, Lk, D]`` (grouped-query
    heads are repeated); ``q_runs``/``k_runs`` from :func:`segment_runs` (``k_runs`` defaults
    to ``q_runs``: self-attention). A query whose document has no key, and padding, gets
    zeros, as :func:`attend` gives it; with ``padding_sees_itself`` a padding query attends to
    its own position only (its value), as VILA's dense mask lets it. ``causal`` needs the
    query and key runs to be the same positions (self-attention). Returns ``[B, H, Lq, D]``.
    """
    k_runs = q_runs if k_runs is None else k_runs
    groups = query.shape[1] // key.shape[1]
    rows = []
    for b, (q_row, k_row) in enumerate(zip(q_runs, k_runs)):
        keys_of = {segment: (start, end) for segment, start, end in k_row if segment > 0}
        pieces = []
        for segment, start, end in q_row:
            q = query[b : b + 1, :, start:end]
            if segment > 0 and segment in keys_of:
                k_start, k_end = keys_of[segment]
                k, v = (
                    t[b : b + 1, :, k_start:k_end].repeat_interleave(groups, dim=1)
                    for t in (key, value)
                )
                pieces.append(
                    F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
                )
            elif segment == 0 and padding_sees_itself:  # softmax over one key: its value
                pieces.append(value[b : b + 1, :, start:end].repeat_interleave(groups, dim=1))
            else:
                pieces.append(torch.zeros_like(q[..., :1]).expand(*q.shape[:-1], value.shape[-1]))
        rows.append(torch.cat(pieces, dim=2))
    return torch.cat(rows, dim=0)


def _block_ranges(segment_ids: torch.Tensor, block: int):
    """Per ``block`` positions of ``[B, L]`` ids: lowest and highest real segment (an empty
    range where there is none), whether it holds one real segment only, whether padding."""
    batch, length = segment_ids.shape
    padded = F.pad(segment_ids, (0, -length % block)).unflatten(1, (-1, block))
    real = padded > 0
    big = torch.iinfo(padded.dtype).max
    low = padded.masked_fill(~real, big).amin(-1)
    high = padded.masked_fill(~real, 0).amax(-1)
    uniform = real.all(-1) & (low == high)
    return low, high, uniform, (~real).any(-1)


def document_block_mask(
    q_segment_ids: torch.Tensor,
    k_segment_ids: torch.Tensor,
    *,
    causal: bool,
    padding_sees_itself: bool = False,
):
    """A FlexAttention ``BlockMask`` for :func:`document_mask` (``causal``:
    :func:`document_causal_mask`), from per-block segment ranges: a tile is visited when
    its query and key blocks share a segment range (and, causal, it is not above the
    diagonal), and computed without a mask when both blocks hold the same one document
    and it lies below the diagonal. The elementwise rule (``mask_mod``) decides inside
    the other tiles. ``padding_sees_itself`` adds the diagonal for padding (VILA's mask).

    >>> segments = torch.tensor([[1] * 256 + [2] * 128])  # 3 x 3 tiles of 128
    >>> mask = document_block_mask(segments, segments, causal=True)
    >>> mask.to_dense()[0, 0].tolist()  # the tiles visited
    [[1, 0, 0], [1, 1, 0], [0, 0, 1]]
    >>> mask.full_kv_num_blocks[0, 0].tolist()  # one tile is one document, below the diagonal
    [0, 1, 0]
    """
    from torch.nn.attention.flex_attention import BlockMask

    q_low, q_high, q_uniform, q_padding = _block_ranges(q_segment_ids, FLEX_BLOCK)
    k_low, k_high, k_uniform, _ = _block_ranges(k_segment_ids, FLEX_BLOCK)
    overlap = (q_low[:, :, None] <= k_high[:, None, :]) & (k_low[:, None, :] <= q_high[:, :, None])
    full = q_uniform[:, :, None] & k_uniform[:, None, :] & (q_low[:, :, None] == k_low[:, None, :])
    q_index = torch.arange(q_low.shape[1], device=q_low.device)[:, None]
    k_index = torch.arange(k_low.shape[1], device=k_low.device)[None, :]
    if causal:
        overlap &= k_index <= q_index
        full &= k_index < q_index
    if padding_sees_itself:
        overlap |= q_padding[:, :, None] & (k_index == q_index)
    partial = overlap & ~full

    def blocks(flags: torch.Tensor):
        # kv block indices, the visited ones first (a stable sort keeps them in order)
        order = torch.argsort((~flags).to(torch.int8), dim=-1, stable=True)
        return flags.sum(-1, dtype=torch.int32)[:, None], order.to(torch.int32)[:, None]

    q_ids, k_ids = q_segment_ids, k_segment_ids

    def mask_mod(b, h, q, k):
        allowed = (q_ids[b, q] == k_ids[b, k]) & (q_ids[b, q] > 0)
        if causal:
            allowed = allowed & (k <= q)
        if padding_sees_itself:
            allowed = allowed | ((q_ids[b, q] == 0) & (q == k))
        return allowed

    partial_count, partial_index = blocks(partial)
    full_count, full_index = blocks(full)
    mask = BlockMask.from_kv_blocks(
        partial_count,
        partial_index,
        full_count,
        full_index,
        BLOCK_SIZE=FLEX_BLOCK,
        mask_mod=mask_mod,
        seq_lengths=(q_segment_ids.shape[1], k_segment_ids.shape[1]),
    )
    return mask


Attend = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def flex_attend(query, key, value, block_mask) -> torch.Tensor:
    """FlexAttention over a :func:`document_block_mask`, compiled on CUDA (its fused kernel;
    uncompiled it computes every score); a query without a key gets zeros."""
    from torch.nn.attention.flex_attention import flex_attention

    groups = query.shape[1] != key.shape[1]
    if query.is_cuda:
        return _compiled_flex()(query, key, value, block_mask=block_mask, enable_gqa=groups)
    with warnings.catch_warnings():  # the CPU has no fused FlexAttention: a check, not a way
        warnings.simplefilter("ignore")
        return flex_attention(query, key, value, block_mask=block_mask, enable_gqa=groups)


_COMPILED: list = []


def _compiled_flex():
    if not _COMPILED:
        from torch.nn.attention.flex_attention import flex_attention

        _COMPILED.append(torch.compile(flex_attention, dynamic=False))
    return _COMPILED[0]


def document_attention(
    kind: str, q_segment_ids: torch.Tensor, k_segment_ids: torch.Tensor, *, causal: bool
) -> Attend:
    """``attend(query, key, value)`` with the queries of ``q_segment_ids`` seeing only the keys
    of their own document in ``k_segment_ids`` (``causal``: and not after themselves), by
    ``kind``: ``varlen``, ``flex``, or ``dense`` (:func:`attend` with the ``L × L`` mask, the
    reference). Built once per forward and shared by every layer.

    >>> torch.manual_seed(0) and None
    >>> q, k, v = (torch.randn(1, 2, 5, 4) for _ in range(3))
    >>> segments = torch.tensor([[1, 1, 2, 2, 0]])
    >>> outs = [document_attention(kind, segments, segments, causal=True)(q, k, v)
    ...         for kind in ("varlen", "flex", "dense")]
    >>> all(torch.allclose(out, outs[-1], atol=1e-6) for out in outs)
    True
    """
    if kind == "varlen":
        q_runs = segment_runs(q_segment_ids)
        k_runs = q_runs if k_segment_ids is q_segment_ids else segment_runs(k_segment_ids)
        return lambda q, k, v: varlen_attend(q, k, v, q_runs, k_runs, causal=causal)
    if kind == "flex":
        block_mask = document_block_mask(q_segment_ids, k_segment_ids, causal=causal)
        return lambda q, k, v: flex_attend(q, k, v, block_mask)
    if kind != "dense":
        raise ValueError(f"unknown attention {kind!r} (varlen, flex or dense)")
    if causal:
        mask = document_causal_mask(q_segment_ids)
    else:
        mask = document_mask(q_segment_ids, k_segment_ids)
    return lambda q, k, v: attend(q, k, v, mask)
