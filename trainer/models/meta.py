"""An LM too large to load whole on every process: built on the meta device, sharded, then
each process reads only its own part of the weights from the safetensors files.

``from_pretrained`` on every rank costs the whole float32 model per process
(about 27 GB for a 7B LM, 216 GB of host memory across 8 ranks) before FSDP2
keeps an eighth of it. Here instead:

1. :func:`meta_lm` builds the architecture from ``config.json`` on the meta
   device: shapes, no memory;
2. the runtime shards it (``fully_shard``: each parameter becomes a DTensor
   whose local part is a block of rows, dimension 0, on this rank);
3. :func:`materialize` allocates only those local parts on the device
   (``to_empty``), reads each one's rows straight from the safetensors files
   (``safe_open(...).get_slice``: the other rows are never read), and
   recomputes the buffers the files do not hold (rotary frequencies) with
   transformers' own initialisation.

Without a process group (or under DDP) nothing is sharded and every rank
reads every row, which is what ``from_pretrained`` would have done.
"""

from __future__ import annotations

import json
import os

import torch
from torch import nn

from trainer.config import ConfigError

SAFETENSORS = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"


def has_safetensors(path: str) -> bool:
    return os.path.isdir(path) and any(
        os.path.exists(os.path.join(path, name)) for name in (SAFETENSORS, SAFETENSORS_INDEX)
    )


def meta_lm(path: str, attn_implementation: str) -> nn.Module:
    """The causal LM of the model directory ``path``, its parameters on the meta device."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(path)
    with torch.device("meta"):
        lm = AutoModelForCausalLM.from_config(
            config, attn_implementation=attn_implementation, dtype=torch.float32
        )
    return lm


def weight_files(path: str) -> dict[str, str]:
    """Each tensor name of the directory's safetensors weights → the file that holds it."""
    index = os.path.join(path, SAFETENSORS_INDEX)
    if os.path.exists(index):
        with open(index, encoding="utf-8") as handle:
            weight_map = json.load(handle)["weight_map"]
        return {name: os.path.join(path, file) for name, file in weight_map.items()}
    from safetensors import safe_open

    single = os.path.join(path, SAFETENSORS)
    with safe_open(single, "pt") as handle:
        return {name: single for name in handle.keys()}


def _local_rows(param: torch.Tensor) -> tuple[torch.Tensor, int]:
    """The tensor this rank holds of ``param`` and the row of the whole it starts at."""
    from torch.distributed.tensor import DTensor, Shard

    if not isinstance(param, DTensor):
        return param, 0
    if param.device_mesh.ndim != 1 or param.placements != (Shard(0),):
        raise ConfigError(f"cannot load a parameter placed as {param.placements}")
    local = param.to_local()
    # FSDP2 cuts dimension 0 as torch.chunk does: ceil(rows / ranks) per rank, the last shorter
    per_rank = -(-param.shape[0] // param.device_mesh.size())
    return local, param.device_mesh.get_local_rank() * per_rank


@torch.no_grad()
def materialize(lm: nn.Module, path: str, device: torch.device) -> int:
    """Give the meta-device (possibly sharded) ``lm`` its weights from ``path``: each rank
    allocates and reads only its rows. Returns how many tensors were read."""
    from safetensors import safe_open

    lm.to_empty(device=device)
    for module in lm.modules():  # buffers are not in the files: transformers computes them
        if any(True for _ in module.buffers(recurse=False)):
            lm._init_weights(module)
    files = weight_files(path)
    params = dict(lm.named_parameters())  # a tied weight is listed once, as the files do
    missing = sorted(set(params) - set(files))
    if missing:
        raise ConfigError(f"{path} holds no weight {missing[0]} (of {len(missing)} missing)")
    by_file: dict[str, list[str]] = {}
    for name in params:
        by_file.setdefault(files[name], []).append(name)
    for file, names in by_file.items():
        with safe_open(file, "pt") as handle:
            for name in names:
                local, start = _local_rows(params[name])
                rows = handle.get_slice(name)[start : start + local.shape[0]]
                local.copy_(rows)
    return len(params)
