"""The chunked cross-entropy against the whole-logits one: the same sum and gradients, and
never the whole ``[B, L, V]`` float32 logits in memory."""

import pytest
import torch
import torch.nn.functional as F

from trainer.models.loss import chunked_cross_entropy
from trainer.runtime import cpu_allocations


def reference(hidden, weight, targets, loss_weights=None):
    logits = (hidden @ weight.T).float().flatten(0, 1)
    losses = F.cross_entropy(logits, targets.flatten(), reduction="none")
    if loss_weights is not None:
        losses = losses * loss_weights.flatten()
    return losses.sum()


def inputs(seed=0, batch=3, length=10, width=8, vocab=30):
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(batch, length, width, generator=generator, requires_grad=True)
    weight = torch.randn(vocab, width, generator=generator, requires_grad=True)
    targets = torch.randint(0, vocab, (batch, length), generator=generator)
    targets[0, :4] = -100
    targets[-1, 7:] = -100
    return hidden, weight, targets


def gradients(loss, hidden, weight):
    return torch.autograd.grad(loss, (hidden, weight))


@pytest.mark.parametrize("chunk_elements", [1, 30 * 3, 30 * 7, 10**6])
@pytest.mark.parametrize("static_shapes", [False, True])
def test_the_sum_and_gradients_are_the_whole_logits_ones(chunk_elements, static_shapes):
    hidden, weight, targets = inputs()
    loss_weights = torch.rand(3, 10, generator=torch.Generator().manual_seed(1))
    for given in (None, loss_weights):
        if given is None:
            expected = F.cross_entropy(
                (hidden @ weight.T).flatten(0, 1), targets.flatten(), reduction="sum"
            )
        else:
            kept = (targets != -100).float() * given
            expected = reference(hidden, weight, targets.clamp(min=0), kept)
        ours = chunked_cross_entropy(
            hidden, weight, targets, given,
            chunk_elements=chunk_elements, static_shapes=static_shapes,
        )  # fmt: skip
        torch.testing.assert_close(ours, expected, rtol=0, atol=1e-4)
        for a, b in zip(gradients(ours, hidden, weight), gradients(expected, hidden, weight)):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


def test_a_batch_without_targets_gives_zero_and_zero_gradients():
    hidden, weight, targets = inputs()
    loss = chunked_cross_entropy(hidden, weight, torch.full_like(targets, -100))
    assert float(loss) == 0.0
    for grad in gradients(loss, hidden, weight):
        assert torch.equal(grad, torch.zeros_like(grad))


def largest_allocation(step) -> int:
    return cpu_allocations(step).largest


def test_the_whole_float32_logits_are_never_allocated():
    batch, length, vocab = 2, 512, 8000
    hidden, weight, targets = inputs(batch=batch, length=length, width=16, vocab=vocab)
    whole = batch * length * vocab * 4  # bytes of the [B, L, V] float32 logits
    full = largest_allocation(lambda: reference(hidden, weight, targets.clamp(min=0)).backward())
    assert full >= whole  # the check sees them when they are made
    chunked = largest_allocation(
        lambda: chunked_cross_entropy(hidden, weight, targets, chunk_elements=2**20).backward()
    )
    assert chunked <= 2**20 * 4 < whole / 4
