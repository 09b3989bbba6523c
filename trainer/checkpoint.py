"""Checkpoints: what a run needs to continue exactly where it stopped.

A checkpoint is a directory ``{output}/checkpoints/step-{NNNNNNNN}/`` holding

- ``model.pt`` (rank 0): the trained weights, whole, as a plain state dict
  (PrefixLM: all of it; VILA: the projector, and in stage 1 the LM too);
- ``optimizer.pt`` (rank 0): AdamW's state, whole, keyed by parameter name;
- ``state.json`` (rank 0): step, scheduler state, world size, the run's settings;
- ``data-rank{R}.pt`` (each rank): its data stream's position;
- ``rng-rank{R}.pt`` (each rank): its random number generators (dropout);

and ``{output}/checkpoints/latest`` names the newest complete one: it is
written after every rank has finished, so a run killed while saving resumes
from the one before. ``output`` is a local directory or a ``gs://`` /
``s3://`` URL (through fsspec). Weights and optimizer state are gathered
whole (``torch.distributed.checkpoint.state_dict``), so a checkpoint is the
same file under DDP, FSDP2 or one process; the data positions are per rank,
so a run resumes with the world size it was saved with.
"""

from __future__ import annotations

import io
import json
import os
from typing import Any

import torch
from torch import nn

from trainer.config import ConfigError

LATEST = "latest"


def _join(base: str, *names: str) -> str:
    if "://" in base:
        return "/".join([base.rstrip("/"), *names])
    return os.path.join(base, *names)


def _fs(url: str):
    import fsspec

    return fsspec.core.url_to_fs(url)[0]


def _write(url: str, data: bytes) -> None:
    if "://" in url:
        with _fs(url).open(url, "wb") as handle:
            handle.write(data)
        return
    os.makedirs(os.path.dirname(url), exist_ok=True)
    partial = url + ".partial"
    with open(partial, "wb") as handle:
        handle.write(data)
    os.replace(partial, url)  # a reader never sees half a file


def _read(url: str) -> bytes:
    if "://" in url:
        with _fs(url).open(url, "rb") as handle:
            return handle.read()
    with open(url, "rb") as handle:
        return handle.read()


def _exists(url: str) -> bool:
    return _fs(url).exists(url) if "://" in url else os.path.exists(url)


def _save_torch(url: str, value: Any) -> None:
    buffer = io.BytesIO()
    torch.save(value, buffer)
    _write(url, buffer.getvalue())


def _load_torch(url: str, weights_only: bool = True) -> Any:
    return torch.load(io.BytesIO(_read(url)), map_location="cpu", weights_only=weights_only)


def directory(output: str) -> str:
    return _join(output, "checkpoints")


def step_name(step: int) -> str:
    return f"step-{step:08d}"


def latest(output: str) -> str | None:
    """The newest complete checkpoint under ``output``, or ``None``."""
    marker = _join(directory(output), LATEST)
    if not _exists(marker):
        return None
    return _join(directory(output), _read(marker).decode().strip())


def is_checkpoint(where: str) -> bool:
    """A checkpoint directory (not an output directory holding checkpoints)."""
    return _exists(_join(where, "state.json"))


def read_state(where: str) -> dict:
    """``state.json`` of the checkpoint at ``where``: step, world size, settings."""
    return json.loads(_read(_join(where, "state.json")))


def trained_state(model: nn.Module, trainable: set[str]) -> dict[str, torch.Tensor]:
    """The full weights of the parameters that train, on rank 0 (empty elsewhere under
    several processes)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    state = get_model_state_dict(
        model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
    )
    return {name: value for name, value in state.items() if name in trainable}


def load_weights(model: nn.Module, weights: dict[str, torch.Tensor], where: str) -> None:
    """Set weights by name; every given name must exist in the model."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    names = _parameter_names(model)
    unknown = sorted(set(weights) - names)
    if unknown:
        raise ConfigError(f"{where} holds weights this model does not have: {unknown[0]}, …")
    set_model_state_dict(
        model, weights, options=StateDictOptions(full_state_dict=True, strict=False)
    )


def _parameter_names(model: nn.Module) -> set[str]:
    if isinstance(model, nn.parallel.DistributedDataParallel):
        model = model.module
    return {name for name, _ in model.named_parameters()}


def save(
    output: str,
    step: int,
    *,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler,
    loader,
    runtime,
    trainable: set[str],
    settings: dict[str, Any],
    keep: int,
) -> str:
    """Write the checkpoint of ``step`` (every rank calls this); returns its URL."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    where = _join(directory(output), step_name(step))
    weights = trained_state(model, trainable)
    optimizer_state = get_optimizer_state_dict(
        model, optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
    )
    if runtime.is_main:
        _save_torch(_join(where, "model.pt"), weights)
        _save_torch(_join(where, "optimizer.pt"), optimizer_state)
        state = {
            "step": step,
            "world_size": runtime.world_size,
            "scheduler": scheduler.state_dict(),
            "settings": settings,
        }
        _write(_join(where, "state.json"), json.dumps(state, indent=1, default=str).encode())
    rank = f"rank{runtime.rank:05d}"
    _save_torch(_join(where, f"data-{rank}.pt"), loader.state_dict())
    _save_torch(_join(where, f"rng-{rank}.pt"), runtime.rng_state())
    runtime.barrier()
    if runtime.is_main:
        _write(_join(directory(output), LATEST), step_name(step).encode())
        _prune(output, keep)
    runtime.barrier()
    return where


def _prune(output: str, keep: int) -> None:
    root = directory(output)
    if "://" in root:
        fs = _fs(root)
        names = sorted(os.path.basename(p.rstrip("/")) for p in fs.ls(root, detail=False))
    else:
        fs, names = None, sorted(os.listdir(root))
    steps = [name for name in names if name.startswith("step-")]
    for name in steps[: max(0, len(steps) - keep)]:
        if fs is not None:
            fs.rm(_join(root, name), recursive=True)
        else:
            import shutil

            shutil.rmtree(os.path.join(root, name))


def load(
    where: str,
    *,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler,
    loader,
    runtime,
) -> int:
    """Restore everything from the checkpoint at ``where``; returns its step."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    state = json.loads(_read(_join(where, "state.json")))
    if state["world_size"] != runtime.world_size:
        raise ConfigError(
            f"{where} was saved by {state['world_size']} processes, this run has "
            f"{runtime.world_size}: the data streams resume only with the same number"
        )
    load_weights(model, _load_torch(_join(where, "model.pt")), where)
    set_optimizer_state_dict(
        model,
        optimizer,
        _load_torch(_join(where, "optimizer.pt")),
        options=StateDictOptions(full_state_dict=True),
    )
    scheduler.load_state_dict(state["scheduler"])
    rank = f"rank{runtime.rank:05d}"
    # the data state is the loader's own structure, saved by this code: not only tensors
    loader.load_state_dict(_load_torch(_join(where, f"data-{rank}.pt"), weights_only=False))
    runtime.set_rng_state(_load_torch(_join(where, f"rng-{rank}.pt")))
    return int(state["step"])


def init_weights(model: nn.Module, where: str) -> int:
    """Start from the trained weights of a checkpoint (``--init``: VILA stage 1 from stage 0);
    ``where`` is a checkpoint directory or an output directory (its latest). Returns how
    many tensors were set."""
    if _exists(_join(where, "model.pt")):
        path = where
    else:
        path = latest(where)
        if path is None:
            raise ConfigError(f"no checkpoint at {where}")
    weights = _load_torch(_join(path, "model.pt"))
    count = len(weights)  # set_model_state_dict fills the dict in with the model's other tensors
    load_weights(model, weights, path)
    return count
