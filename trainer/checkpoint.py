"""Checkpoints: what a run needs to continue exactly where it stopped.

A checkpoint is a directory ``{output}/checkpoints/step-{NNNNNNNN}/`` holding
the trained weights (PrefixLM: all of them; VILA: the projector, and in stage
1 the LM too) and AdamW's state, keyed by parameter name, in one of two forms:

- one process: ``model.pt`` and ``optimizer.pt``, plain state dicts, whole;
- several processes: ``dcp/``, a Distributed Checkpoint
  (``torch.distributed.checkpoint``) that every rank writes its own shards
  of, in parallel (FSDP2: its shard; DDP: its share of the replicated
  tensors), with nothing gathered on one rank;

and beside them

- ``state.json`` (rank 0): step, format, scheduler state, world size, the
  names of the trained weights, the run's settings;
- ``data-rank{R}.pt`` (each rank): its data stream's position;
- ``rng-rank{R}.pt`` (each rank): its random number generators (dropout);

and ``{output}/checkpoints/latest`` names the newest complete one: it is
written after every rank has finished, so a run killed while saving resumes
from the one before. ``output`` is a local directory or a ``gs://`` /
``s3://`` URL (through fsspec).

Either form loads at any world size: ``model.pt`` whole on every rank, a
Distributed Checkpoint resharded to the ranks that load it (one process,
DDP or FSDP2). The data positions are per rank: at the world size saved,
each rank continues its stream; at another, the loader must take the
positions of all the saved ranks (``load_state_dicts(states)``), or the
resume is refused in one line.
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


def _storage(url: str, writing: bool):
    import torch.distributed.checkpoint as dcp

    if "://" in url:
        return dcp.FsspecWriter(url) if writing else dcp.FsspecReader(url)
    return dcp.FileSystemWriter(url) if writing else dcp.FileSystemReader(url)


def _sharded_states(model: nn.Module, optimizer, names: set[str]) -> dict[str, Any]:
    """The model's ``names`` and the optimizer's state as each rank holds them (shards under
    FSDP2), the form ``torch.distributed.checkpoint`` saves and loads in place."""
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    weights = {name: value for name, value in get_model_state_dict(model).items() if name in names}
    states: dict[str, Any] = {"model": weights}
    if optimizer is not None:
        states["optimizer"] = get_optimizer_state_dict(model, optimizer)
    return states


def _load_sharded(where: str, model: nn.Module, optimizer, names: set[str]) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    states = _sharded_states(model, optimizer, names)
    dcp.load(states, storage_reader=_storage(_join(where, "dcp"), writing=False))
    set_model_state_dict(model, states["model"], options=StateDictOptions(strict=False))
    if optimizer is not None:
        set_optimizer_state_dict(model, optimizer, states["optimizer"])


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
    sharded = runtime.world_size > 1
    if sharded:  # every rank writes its own part, at once
        import torch.distributed.checkpoint as dcp

        states = _sharded_states(model, optimizer, trainable)
        dcp.save(states, storage_writer=_storage(_join(where, "dcp"), writing=True))
    else:
        weights = trained_state(model, trainable)
        optimizer_state = get_optimizer_state_dict(
            model, optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
        )
        _save_torch(_join(where, "model.pt"), weights)
        _save_torch(_join(where, "optimizer.pt"), optimizer_state)
    if runtime.is_main:
        state = {
            "step": step,
            "format": "dcp" if sharded else "file",
            "world_size": runtime.world_size,
            "scheduler": scheduler.state_dict(),
            "trained": sorted(trainable),
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

    state = read_state(where)
    saved_by = state["world_size"]
    resized = saved_by != runtime.world_size
    if resized and not hasattr(loader, "load_state_dicts"):
        raise ConfigError(
            f"{where} was saved by {saved_by} processes, this run has {runtime.world_size}: "
            "the weights would reshard, but this data stream cannot take the positions of "
            f"{saved_by} streams; resume with {saved_by} processes"
        )
    if state.get("format") == "dcp":
        _load_sharded(where, model, optimizer, set(state["trained"]))
    else:
        load_weights(model, _load_torch(_join(where, "model.pt")), where)
        set_optimizer_state_dict(
            model,
            optimizer,
            _load_torch(_join(where, "optimizer.pt")),
            options=StateDictOptions(full_state_dict=True),
        )
    scheduler.load_state_dict(state["scheduler"])

    def data_state(rank: int):
        # the data state is the loader's own structure, saved by this code: not only tensors
        return _load_torch(_join(where, f"data-rank{rank:05d}.pt"), weights_only=False)

    if resized:
        loader.load_state_dicts([data_state(rank) for rank in range(saved_by)])
    else:
        loader.load_state_dict(data_state(runtime.rank))
        # dropout's generators continue per rank; after a resize they keep this run's seeds
        runtime.set_rng_state(_load_torch(_join(where, f"rng-rank{runtime.rank:05d}.pt")))
    return int(state["step"])


def init_weights(model: nn.Module, where: str) -> int:
    """Start from the trained weights of a checkpoint (``--init``: VILA stage 1 from stage 0);
    ``where`` is a checkpoint directory or an output directory (its latest). Returns how
    many tensors were set."""
    path = where if is_checkpoint(where) else latest(where)
    if path is None:
        raise ConfigError(f"no checkpoint at {where}")
    state = read_state(path)
    if state.get("format") == "dcp":
        names = set(state["trained"])
        unknown = sorted(names - _parameter_names(model))
        if unknown:
            raise ConfigError(f"{path} holds weights this model does not have: {unknown[0]}, …")
        _load_sharded(path, model, None, names)
        return len(names)
    weights = _load_torch(_join(path, "model.pt"))
    count = len(weights)  # set_model_state_dict fills the dict in with the model's other tensors
    load_weights(model, weights, path)
    return count
