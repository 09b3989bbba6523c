"""One rank loading an LM for FSDP2 the meta-device way, started by the tests under
``torch.distributed.run``.

    python -m torch.distributed.run --standalone --nproc_per_node 2 \\
        -m tests.trainer.meta_worker SPEC.json

SPEC.json gives ``lm`` (a model directory of safetensors weights), ``precision`` and
``out``. Each rank builds the LM on the meta device, shards it with the runtime's FSDP2
(``fully_shard`` per decoder layer, then the whole), reads its rows (``materialize``)
while every CPU allocation is recorded, and writes ``rank{R}.pt``: the peak bytes held
during the load, the parameters' dtypes, and on rank 0 whether the gathered weights and
buffers equal a plain ``from_pretrained`` load; the growth of the resident set over the
load, anonymous and file-backed (mapped safetensors pages); with ``forward``, the dtype
the layers computed in and the gradients' dtype after one forward and backward pass.
"""

from __future__ import annotations

import json
import os
import sys

import torch


def resident() -> dict[str, int]:
    """This process's resident memory now: anonymous and file-backed pages, in bytes."""
    with open("/proc/self/status") as handle:
        fields = dict(line.split(":", 1) for line in handle)
    return {name: int(fields[name].split()[0]) * 1024 for name in ("RssAnon", "RssFile")}


def grown(before: dict[str, int]) -> dict[str, int]:
    return {name: value - before[name] for name, value in resident().items()}


def main(path: str) -> None:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    from transformers import AutoModelForCausalLM

    from trainer.models.meta import materialize
    from trainer.models.vila import load_lm
    from trainer.runtime import cpu_allocations, start

    with open(path) as handle:
        spec = json.load(handle)
    runtime = start("cpu", spec.get("precision", "fp32"))
    try:
        lm = load_lm(spec["lm"], "sdpa", meta=True)
        assert all(p.is_meta for p in lm.parameters())
        layers = [m for m in lm.modules() if type(m).__name__ in lm._no_split_modules]
        lm = runtime.wrap(lm, "fsdp", layers=layers)
        before = resident()
        allocations = cpu_allocations(lambda: materialize(lm, spec["lm"], runtime.device))
        out = {
            "peak": allocations.peak,
            "resident": grown(before),
            "strategy": runtime.strategy,
            "dtypes": sorted({str(p.dtype) for p in lm.parameters()}),
            "local_elements": sum(p.to_local().numel() for p in lm.parameters()),
            "elements": sum(p.numel() for p in lm.parameters()),
        }
        if spec.get("forward"):
            seen = []
            layer = layers[0].self_attn.q_proj
            hook = layer.register_forward_pre_hook(lambda m, a: seen.append(m.weight.dtype))
            ids = torch.arange(16).reshape(2, 8) % lm.config.vocab_size
            with runtime.autocast():
                lm(input_ids=ids).logits.float().sum().backward()
            hook.remove()
            out["compute_dtype"] = str(seen[0])
            out["grad_dtypes"] = sorted({str(p.grad.dtype) for p in lm.parameters()})
        full = get_model_state_dict(lm, options=StateDictOptions(full_state_dict=True))
        buffers = {name: b.clone() for name, b in lm.named_buffers()}
        if runtime.is_main:
            plain = AutoModelForCausalLM.from_pretrained(spec["lm"], dtype=torch.float32)
            reference = plain.state_dict()
            out["equal"] = sorted(full) == sorted(
                name for name in reference if name in full
            ) and all(torch.equal(full[name], reference[name]) for name in full)
            out["buffers_equal"] = all(
                torch.equal(value, dict(plain.named_buffers())[name])
                for name, value in buffers.items()
            )
        torch.save(out, os.path.join(spec["out"], f"rank{runtime.rank}.pt"))
    finally:
        runtime.close()


if __name__ == "__main__":
    main(sys.argv[1])
