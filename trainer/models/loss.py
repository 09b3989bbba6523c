"""The loss over the output vocabulary, a chunk of positions at a time.

Cross-entropy on ``[B, L, V]`` logits in float32 holds ``4·B·L·V`` bytes, and
its gradient as much again (2.1 GB each at 4 × 4096 × 32,000). Here the
hidden states of the positions that have a target are cut into chunks of at
most ``chunk_elements // V`` positions; each chunk's logits are made, upcast,
reduced to its summed loss and dropped, and remade in the backward pass
(activation checkpointing per chunk). So at most one chunk's logits exist at
a time, and the result is the same sum:

    >>> import torch
    >>> torch.manual_seed(0) and None
    >>> hidden, weight = torch.randn(2, 6, 8), torch.randn(50, 8)
    >>> targets = torch.tensor([[1, 2, -100, 4, 5, 6], [7, -100, -100, 8, 9, 10]])
    >>> ours = chunked_cross_entropy(hidden, weight, targets, chunk_elements=100)  # 2 positions
    >>> full = torch.nn.functional.cross_entropy(
    ...     (hidden @ weight.T).flatten(0, 1), targets.flatten(), reduction="sum")
    >>> torch.allclose(ours, full)
    True
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

IGNORE_INDEX = -100
CHUNK_ELEMENTS = 2**25  # logits per chunk: 128 MiB in float32 (1,048 positions at V = 32,000)


def _chunk_loss(hidden, weight, targets, loss_weights):
    logits = (hidden @ weight.T).float()
    losses = F.cross_entropy(logits, targets, reduction="none")
    return (losses * loss_weights).sum()


def chunked_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    loss_weights: torch.Tensor | None = None,
    *,
    chunk_elements: int = CHUNK_ELEMENTS,
    static_shapes: bool = False,
) -> torch.Tensor:
    """The summed (float32) cross-entropy of ``hidden`` ``[..., D]`` projected by ``weight``
    ``[V, D]`` against ``targets`` ``[...]`` (``-100``: no loss), each position's loss
    times ``loss_weights`` where given. Only positions with a target and a non-zero weight
    are projected, unless ``static_shapes`` (XLA), where every position is, in fixed chunks."""
    targets = targets.flatten()
    hidden = hidden.flatten(0, -2)
    weights = (targets != IGNORE_INDEX).to(torch.float32)
    if loss_weights is not None:
        weights = weights * loss_weights.flatten().to(torch.float32)
    if not static_shapes:
        where = weights.nonzero().squeeze(1)
        hidden, targets, weights = hidden[where], targets[where], weights[where]
    targets = targets.clamp(min=0)  # a -100 left in (static shapes) has weight 0
    size = max(1, chunk_elements // weight.shape[0])
    # zero, but tied to both inputs: a batch without targets still gives every weight a
    # gradient (DDP wants them all in the graph)
    total = 0.0 * (hidden.sum() + weight.sum()).float()
    for start in range(0, hidden.shape[0], size):
        piece = slice(start, start + size)
        total = total + checkpoint(
            _chunk_loss,
            hidden[piece],
            weight,
            targets[piece],
            weights[piece],
            use_reentrant=False,
        )
    return total
