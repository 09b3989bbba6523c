"""Peak memory of one training step, whole-logits cross-entropy against the chunked one.

    python benchmarks/loss_memory.py                       # B=2, L=2048, V=32,000 on the CPU
    python benchmarks/loss_memory.py --device cuda         # the same on a GPU

A Llama-architecture LM with random weights (width 256, 2 layers, vocabulary
32,000) takes one forward and backward pass over ``B × L`` tokens, with the loss
the trainer's VILA used before (the LM's ``[B, L, V]`` logits, upcast to
float32, ``F.cross_entropy``) and with ``trainer.models.loss.chunked_cross_entropy``
on its last hidden states. Reported: the peak of the memory allocated during the
step above what was allocated before it (weights, inputs), on the CPU from the
profiler's allocation records (``trainer.runtime.cpu_allocations``), on CUDA
from ``torch.cuda.max_memory_allocated``.
"""

from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[0] = ROOT  # not benchmarks/: its profile.py would hide the standard library's

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from trainer.models.loss import chunked_cross_entropy  # noqa: E402
from trainer.runtime import cpu_allocations  # noqa: E402


def whole(lm, ids, labels):
    logits = lm(input_ids=ids).logits.float()
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction="sum")


def chunked(lm, ids, labels):
    hidden = lm.base_model(input_ids=ids).last_hidden_state
    return chunked_cross_entropy(hidden, lm.get_output_embeddings().weight, labels)


def peak_bytes(step, device) -> int:
    """Peak bytes allocated while ``step`` runs, above those allocated before it."""
    if device.type == "cuda":
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        step()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - before
    return cpu_allocations(step).peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--vocab-size", type=int, default=32000)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    from transformers import LlamaConfig, LlamaForCausalLM

    device = torch.device(args.device)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=args.vocab_size,
        hidden_size=args.width,
        intermediate_size=4 * args.width,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=args.seq_len,
    )
    lm = LlamaForCausalLM(config).to(device)
    ids = torch.randint(3, args.vocab_size, (args.batch_size, args.seq_len), device=device)
    labels = torch.roll(ids, -1, dims=1)
    labels[:, -1] = -100
    logits_mib = args.batch_size * args.seq_len * args.vocab_size * 4 / 2**20
    print(
        f"B={args.batch_size} L={args.seq_len} V={args.vocab_size} on {device.type}: "
        f"the float32 logits are {logits_mib:,.0f} MiB"
    )
    losses = {}
    for name, loss_fn in (("whole logits", whole), ("chunked", chunked)):
        lm.zero_grad(set_to_none=True)

        def step():
            loss = loss_fn(lm, ids, labels)
            loss.backward()
            losses[name] = float(loss.detach())

        peak = peak_bytes(step, device)
        print(f"{name:12} peak {peak / 2**20:8,.0f} MiB above the weights; loss {losses[name]:.4f}")


if __name__ == "__main__":
    main()
