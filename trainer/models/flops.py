"""Training FLOPs of a batch, for the model FLOP utilisation (MFU) in the loop's log line.

PaLM's count (appendix B), per real token: ``6 · N`` for the matrix
multiplications of the ``N`` weights it passes (2 forward, 2 for the gradient
of the activations, 2 for the gradient of the weights), plus ``12 · layers ·
width · n`` for attention over the ``n`` keys it sees (QKᵀ and AV, 2 · 2 ·
width · n forward, times 3). Packed documents attend within themselves, so
``n`` is the length of the token's document, not ``seq_len``, and a batch's
attention term is ``12 · layers · width · Σ length²`` over its documents.
Weights that do not train save their 2 weight-gradient FLOPs (factor 4 for
them), and a frozen part that nothing trainable precedes runs forward only
(factor 2). Convolutional parts (PrefixLM's stem) and the vision tower are counted
once per image by :func:`forward_flops`. MFU is the FLOPs per second over the devices'
peak rate.

    >>> import torch
    >>> document_lengths(torch.tensor([[1, 1, 1, 2, 0], [1, 1, 1, 1, 1]])).tolist()
    [[3, 1, 0, 0, 0], [5, 0, 0, 0, 0]]
    >>> int(attention_flops(torch.tensor([[1, 1, 1, 2, 0]]), layers=2, width=8, factor=6))
    1920
"""

from __future__ import annotations

import torch


def document_lengths(segment_ids: torch.Tensor, documents: int | None = None) -> torch.Tensor:
    """``[B, documents]`` (default ``L``): how many positions segment 1, 2, … holds in each
    row, read on the device (no host read)."""
    documents = documents or segment_ids.shape[1]
    counts = torch.zeros(
        segment_ids.shape[0], documents + 1, dtype=torch.long, device=segment_ids.device
    )
    counts.scatter_add_(1, segment_ids, torch.ones_like(segment_ids))
    return counts[:, 1:]


def attention_flops(
    q_segment_ids: torch.Tensor,
    k_segment_ids: torch.Tensor | None = None,
    *,
    layers: int,
    width: int,
    factor: int,
) -> torch.Tensor:
    """``2 · factor · layers · width · Σ q_length · k_length`` over the documents (``factor`` 6
    when training: PaLM's 12); ``k_segment_ids`` defaults to the queries' (self-attention)."""
    if k_segment_ids is None:
        q = k = document_lengths(q_segment_ids)
    else:  # segment numbers are bounded by the longer of the two rows
        documents = max(q_segment_ids.shape[1], k_segment_ids.shape[1])
        q = document_lengths(q_segment_ids, documents)
        k = document_lengths(k_segment_ids, documents)
    return 2 * factor * layers * width * (q * k).sum()


def forward_flops(module: torch.nn.Module, input_shape: tuple[int, ...]) -> int:
    """FLOPs of one forward pass of ``module`` on an input of ``input_shape``, counted by
    ``torch.utils.flop_counter`` on a copy on the meta device (shapes only, no compute):
    for convolutional parts, where ``2 · N`` per token does not apply."""
    import copy

    from torch.utils.flop_counter import FlopCounterMode

    ghost = copy.deepcopy(module).to("meta")
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        ghost(torch.empty(input_shape, device="meta"))
    return counter.get_total_flops()


def matmul_parameters(module: torch.nn.Module) -> int:
    """Parameters that multiply activations: all but embedding tables."""
    tables = {id(m.weight) for m in module.modules() if isinstance(m, torch.nn.Embedding)}
    return sum(p.numel() for p in module.parameters() if id(p) not in tables)
