"""Where the loop runs: the CPU; CUDA, in one process or under ``torchrun``; a TPU through
torch_xla. Every device-specific call of the loop goes through :class:`Runtime`.

- Processes: ``torchrun`` (or any launcher that sets ``RANK``, ``WORLD_SIZE``,
  ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``) gives one process per
  device; the process group is gloo on the CPU, NCCL on CUDA, and XLA's own
  (``init_method="xla://"``, which ``torchrun`` supports) on a TPU.
- Data parallelism: DDP; or FSDP2 (``fully_shard``), which shards each
  layer the model names (VILA: the LM's decoder layers) and the rest of
  the model as one unit, for LMs whose weights and optimizer state do not
  fit one device. Frozen weights (VILA's vision tower) stay replicated. A
  model part on the meta device is sharded there and given its weights by
  the model afterwards (VILA's LM: each process reads its own rows).
- Precision: bf16 autocast on CUDA and XLA, float32 on the CPU (parameters
  and optimizer state stay float32 everywhere). Under FSDP2 with bf16 the
  mixed-precision policy gathers parameters in bf16 and reduces gradients
  in fp32; the sharded master weights stay fp32.
- XLA wants fixed shapes: models encode every image slot there (empty ones
  too), and the step ends with ``torch_xla.sync()``.

    >>> runtime = start("cpu")
    >>> runtime.kind, runtime.world_size, runtime.precision
    ('cpu', 1, 'fp32')
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from typing import Iterable, Iterator

import torch
from torch import nn

from trainer.config import ConfigError


@dataclasses.dataclass
class Runtime:
    kind: str  # "cpu", "cuda" or "xla"
    device: torch.device
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    precision: str = "fp32"
    strategy: str = "none"  # what wrap() did: "none", "ddp" or "fsdp"
    owns_group: bool = False
    data_state: dict | None = None  # XLA: the stream's position after the last batch taken

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def autocast(self):
        if self.precision != "bf16":
            return contextlib.nullcontext()
        return torch.autocast(self.kind, dtype=torch.bfloat16)

    def to_device(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        if self.kind == "xla":  # the device loader has moved it
            batch = dict(batch)
            self.data_state = batch.pop(DATA_STATE)
            return batch
        return {name: value.to(self.device, non_blocking=True) for name, value in batch.items()}

    def batches(self, loader: Iterable[dict[str, torch.Tensor]]) -> Iterator:
        """On XLA, a device loader that copies batches in the background; elsewhere the
        loader's own iterator."""
        if self.kind != "xla":
            return iter(loader)
        import torch_xla.distributed.parallel_loader as pl

        def tagged():
            # the device loader reads ahead: each batch carries the stream's position after
            # it, so a checkpoint records what the loop took, not what was prefetched
            for batch in loader:
                yield {**batch, DATA_STATE: loader.state_dict()}

        return iter(pl.MpDeviceLoader(tagged(), self.device))

    def consumed(self, loader):
        """The loader as a checkpoint should see it: positioned after the batches taken."""
        return _Consumed(loader, self.data_state) if self.data_state is not None else loader

    def resolve_strategy(self, strategy: str = "auto", fsdp_preferred: bool = False) -> str:
        """What :meth:`wrap` will do: ``none`` in one process; ``auto`` is FSDP2 on CUDA for
        models that ask for it, else DDP."""
        if self.world_size == 1:
            return "none"
        if strategy == "auto":
            return "fsdp" if fsdp_preferred and self.kind == "cuda" else "ddp"
        return strategy

    def mixed_precision(self):
        """FSDP2's policy: under bf16, parameters gathered in bf16 for compute, gradients
        reduced in fp32, the sharded master weights (and AdamW's state) fp32."""
        from torch.distributed.fsdp import MixedPrecisionPolicy

        if self.precision != "bf16":
            return MixedPrecisionPolicy()
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)

    def wrap(
        self,
        model: nn.Module,
        strategy: str = "auto",
        layers: Iterable[nn.Module] = (),
        fsdp_preferred: bool = False,
    ) -> nn.Module:
        """The model on the device, wrapped for data parallelism when there are several
        processes (:meth:`resolve_strategy`). Parts on the meta device stay there, sharded:
        the model gives them their weights afterwards (``materialize``)."""
        if self.kind == "xla":
            self._mark_static(model)
        if any(p.is_meta for p in model.parameters()):
            for part in model.children():  # the meta-device parts are given weights later
                if not any(p.is_meta for p in part.parameters()):
                    part.to(self.device)
        else:
            model.to(self.device)
        strategy = self.resolve_strategy(strategy, fsdp_preferred)
        if strategy == "none":
            self.strategy = "none"
            return model
        if strategy == "fsdp":
            if self.kind == "xla":
                raise ConfigError("FSDP2 runs on CUDA and the CPU; on a TPU use --strategy ddp")
            from torch.distributed.fsdp import fully_shard

            policy = self.mixed_precision()
            layers = list(layers)
            in_layers = {p for layer in layers for p in layer.parameters()}
            for layer in layers:
                fully_shard(layer, mp_policy=policy)
            # frozen weights outside the sharded layers (the vision tower) stay whole on every rank
            frozen = {p for p in model.parameters() if not p.requires_grad} - in_layers
            fully_shard(model, ignored_params=frozen or None, mp_policy=policy)
            self.strategy = "fsdp"
            return model
        from torch.nn.parallel import DistributedDataParallel

        self.strategy = "ddp"
        if self.kind == "cuda":
            return DistributedDataParallel(model, device_ids=[self.device.index])
        return DistributedDataParallel(model, gradient_as_bucket_view=self.kind == "xla")

    @staticmethod
    def _mark_static(model: nn.Module) -> None:
        for module in model.modules():
            if hasattr(module, "static_shapes"):
                module.static_shapes = True

    @contextlib.contextmanager
    def accumulating(self, model: nn.Module, sync: bool):
        """Gradients of micro-steps before the last stay local (no collective)."""
        if sync or self.strategy == "none":
            yield
        elif self.strategy == "ddp":
            with model.no_sync():
                yield
        else:
            model.set_requires_gradient_sync(False)
            try:
                yield
            finally:
                model.set_requires_gradient_sync(True)

    def all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        if self.world_size > 1:
            import torch.distributed as dist

            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor

    def step_done(self) -> None:
        """End of an optimizer step: XLA compiles and runs the step's graph here."""
        if self.kind == "xla":
            import torch_xla

            torch_xla.sync()

    def barrier(self) -> None:
        if self.world_size > 1:
            import torch.distributed as dist

            dist.barrier()

    def rng_state(self) -> dict[str, torch.Tensor]:
        state = {"cpu": torch.get_rng_state()}
        if self.kind == "cuda":
            state["cuda"] = torch.cuda.get_rng_state(self.device)
        return state

    def set_rng_state(self, state: dict[str, torch.Tensor]) -> None:
        torch.set_rng_state(state["cpu"])
        if self.kind == "cuda" and "cuda" in state:
            torch.cuda.set_rng_state(state["cuda"], self.device)

    def peak_flops(self) -> float | None:
        """This device's peak dense bf16 FLOP/s, known for CUDA GPUs by name; else ``None``."""
        if self.kind != "cuda" or self.precision != "bf16":
            return None
        name = torch.cuda.get_device_name(self.device)
        for key, tflops in PEAK_BF16_TFLOPS.items():
            if key in name:
                return tflops * 1e12
        return None

    def memory(self) -> str:
        """Peak memory for the log line: CUDA's most allocated since the last line; on the
        CPU the process's peak resident set (it cannot be reset)."""
        if self.kind == "cuda":
            peak = torch.cuda.max_memory_allocated(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            return f"mem {peak / 2**30:,.2f} GiB"
        if self.kind == "cpu":
            import resource

            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
            return f"rss {peak / 2**30:,.2f} GiB"
        return ""

    def close(self) -> None:
        if self.owns_group:
            import torch.distributed as dist

            dist.destroy_process_group()
            self.owns_group = False


DATA_STATE = "__data_state__"
# dense bf16 TFLOP/s (no sparsity) by a part of the device name, for MFU
PEAK_BF16_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0, "L4": 121.0, "A10": 125.0}


@dataclasses.dataclass(frozen=True)
class Allocations:
    largest: int  # bytes of the largest single allocation
    peak: int  # the most bytes held at once, above what was held before


def cpu_allocations(step) -> Allocations:
    """Every CPU allocation ``step()`` makes, from the profiler's allocation records (an
    operator's own memory figure is net of what it frees inside, so it can hide a large
    temporary; these cannot). Tests and benchmarks measure memory with it."""
    from torch._C._profiler import _EventType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()

    def walk(nodes):
        for node in nodes:
            yield node
            yield from walk(node.children)

    records = sorted(
        (
            node
            for node in walk(prof.profiler.kineto_results.experimental_event_tree())
            if node.tag == _EventType.Allocation
        ),
        key=lambda node: node.start_time_ns,
    )
    if not records:
        return Allocations(0, 0)
    sizes = [node.extra_fields.alloc_size for node in records]
    totals = [node.extra_fields.total_allocated for node in records]
    start = totals[0] - sizes[0]
    return Allocations(max(max(sizes), 0), max(max(totals) - start, 0))


class _Consumed:
    def __init__(self, loader, state: dict):
        self.loader, self.state = loader, state

    def state_dict(self) -> dict:
        return self.state


def _xla_available() -> bool:
    try:
        import torch_xla  # noqa: F401
    except ImportError:
        return False
    return True


def resolve_kind(device: str) -> str:
    """``auto``: a TPU when torch_xla is installed and ``PJRT_DEVICE`` is set, else CUDA when
    there is a GPU, else the CPU."""
    if device == "auto":
        if os.environ.get("PJRT_DEVICE") and _xla_available():
            return "xla"
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda: no CUDA device is available")
    if device == "xla" and not _xla_available():
        raise ConfigError("--device xla: torch_xla is not installed (pip install torch_xla)")
    if device not in ("cpu", "cuda", "xla"):
        raise ConfigError(f"unknown device {device!r} (auto, cpu, cuda or xla)")
    return device


def start(device: str = "auto", precision: str = "auto") -> Runtime:
    """The runtime of this process; joins the process group when a launcher started several."""
    import torch.distributed as dist

    kind = resolve_kind(device)
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if precision == "auto":
        precision = "fp32" if kind == "cpu" else "bf16"
    if kind == "cuda":
        torch.cuda.set_device(local_rank)
        where = torch.device("cuda", local_rank)
    elif kind == "xla":
        import torch_xla

        where = torch_xla.device()
    else:
        where = torch.device("cpu")
    owns_group = False
    if world_size > 1 and not dist.is_initialized():
        if kind == "xla":
            import torch_xla.distributed.xla_backend  # noqa: F401  (registers "xla")

            dist.init_process_group("xla", init_method="xla://")
        else:
            dist.init_process_group("nccl" if kind == "cuda" else "gloo")
        owns_group = True
    return Runtime(kind, where, rank, world_size, local_rank, precision, owns_group=owns_group)
