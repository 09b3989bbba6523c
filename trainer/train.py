"""The one training loop, for both models, on every device.

:func:`run` builds what a configuration names (runtime, data, and the model
through ``trainer.models.registry``) and calls :func:`fit`, which reads top to
bottom and reaches the model only through the registry's ``TrainableModel``:

1. check the model against the data (``tokens_per_image``, vocabulary,
   positions) and its attention against the device, and refuse in one line
   before any step;
2. wrap the model for the device and the processes (``trainer.runtime``),
   give a meta-device LM its weights (each process its part), start from
   ``--init``'s weights, build AdamW and the schedule, resume from the latest
   checkpoint;
3. print the derived quantities (tokens per step, parameters trainable and
   frozen);
4. per step: take ``accumulate`` batches, count their target tokens across
   all ranks, run each micro-batch forward (bf16 autocast on accelerators)
   and backward with its summed loss divided by that global count, clip,
   step, log one line per interval, checkpoint.

The loss of a step is therefore the sum of the token losses of every rank
and micro-batch divided by the number of those tokens: every target token
weighs the same, however the tokens fall across documents, micro-batches and
ranks. (DDP and FSDP average gradients over ranks, hence the world size in
the scale.)

The learning rate warms up linearly, then decays:

    >>> from trainer.config import prefixlm_optim
    >>> factor = schedule(prefixlm_optim(warmup=0.2), steps=10)
    >>> [round(factor(step), 3) for step in range(10)]
    [0.5, 1.0, 1.0, 0.875, 0.75, 0.625, 0.5, 0.375, 0.25, 0.125]
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from typing import Any, Callable, TextIO

import torch
from torch import nn

from trainer import checkpoint
from trainer.config import ConfigError, OptimConfig, PrefixLMConfig, TrainConfig, VilaConfig
from trainer.models import registry
from trainer.models.registry import Images, TrainableModel
from trainer.models.slots import check_slots
from trainer.runtime import Runtime, start

READ_COUNTERS = ("samples", "shards_skipped", "samples_skipped")


@dataclasses.dataclass
class Result:
    losses: list[float]  # the loss of every step this run took, in order
    first_step: int  # the step it started from (0, or the checkpoint's)
    steps: int  # the step it ended at
    checkpoint: str | None  # the last checkpoint written
    model: TrainableModel  # the trained model (unwrapped; its weights sharded under FSDP)


def schedule(optim: OptimConfig, steps: int) -> Callable[[int], float]:
    """The learning-rate factor for the optimizer step that follows ``step`` steps."""
    warmup = int(round(optim.warmup * steps))

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, steps - warmup)
        if optim.decay == "linear":
            shape = 1.0 - progress
        else:
            shape = 0.5 * (1.0 + math.cos(math.pi * progress))
        return optim.final_lr_fraction + (1.0 - optim.final_lr_fraction) * shape

    return factor


def make_optimizer(model: TrainableModel | nn.Module, optim: OptimConfig) -> torch.optim.AdamW:
    """AdamW over the trainable parameters; no weight decay on biases and norms (1-D)."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.ndim >= 2], "weight_decay": optim.weight_decay},
        {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(
        [group for group in groups if group["params"]],
        lr=optim.lr,
        betas=optim.betas,
        eps=optim.eps,
    )


def check_model(model: TrainableModel, spec) -> None:
    """The model against the data's spec; one line naming both numbers when they differ."""
    if spec.image_token_id is not None and model.tokens_per_image != spec.tokens_per_image:
        raise ConfigError(
            f"tokens_per_image mismatch: the data has {spec.tokens_per_image} tokens per image, "
            f"{model.image_source} makes {model.tokens_per_image} "
            f"(rebuild with --tokens-per-image {model.tokens_per_image}, or change the model)"
        )
    if spec.vocab_size is not None and spec.vocab_size > model.vocab_size:
        raise ConfigError(
            f"vocabulary mismatch: the data's tokenizer has {spec.vocab_size} pieces, "
            f"the model's vocabulary {model.vocab_size}"
        )
    limit = model.max_positions
    if limit is not None and spec.seq_len > limit:
        raise ConfigError(f"seq_len {spec.seq_len} is longer than the model's {limit} positions")


def check_attention(model: TrainableModel, runtime: Runtime, compile: bool = False) -> None:
    """FlexAttention trains on CUDA only; per-document calls change shape with every batch,
    which XLA and ``torch.compile`` cannot follow."""
    attention, dense = model.attention, model.dense_attention
    if compile and attention == "varlen":
        raise ConfigError(
            "--compile needs --attn-implementation flex (CUDA) or "
            f"{dense}: varlen's per-document calls would recompile for every batch"
        )
    if attention == "flex" and runtime.kind != "cuda":
        raise ConfigError(
            f"--attn-implementation flex trains on CUDA only (PyTorch has no FlexAttention "
            f"backward on {runtime.kind}): use varlen"
        )
    if attention == "varlen" and runtime.kind == "xla":
        raise ConfigError(f"XLA wants fixed shapes: use --attn-implementation {dense} on a TPU")


def check_batch(model: TrainableModel, batch: dict[str, torch.Tensor], spec) -> None:
    """The first batch: its shapes and its image slots, before any step. (Packed PrefixLM
    batches have encoder and decoder rows of their own lengths and no ``segment_ids``.)"""
    if "segment_ids" in batch:
        seq_len = batch["segment_ids"].shape[-1]
        if seq_len != spec.seq_len:
            raise ConfigError(
                f"batches have length {seq_len}, the data's seq_len is {spec.seq_len}"
            )
    size = tuple(batch["images"].shape[-2:])
    if batch["images"].shape[1] and size != (model.image_size, model.image_size):
        raise ConfigError(
            f"images arrive at {size[0]}x{size[1]} px, the model takes "
            f"{model.image_size}x{model.image_size}"
        )
    if spec.image_token_id is not None:
        key = "encoder_input_ids" if model.objective == "prefixlm" else "input_ids"
        problem = check_slots(batch, spec.image_token_id, model.tokens_per_image, key)
        if problem:
            raise ConfigError(problem)


def real_tokens(batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The batch's non-padding tokens: of its rows, or of its packed PrefixLM streams."""
    if "segment_ids" in batch:
        return (batch["segment_ids"] > 0).sum()
    return (batch["encoder_segment_ids"] > 0).sum() + (batch["decoder_segment_ids"] > 0).sum()


def parameter_counts(model: TrainableModel) -> tuple[int, int]:
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    frozen = sum(p.numel() for p in model.parameters() if not p.requires_grad)
    return trainable, frozen


def _millions(count: int) -> str:
    return f"{count / 1e6:,.1f}M" if count >= 100_000 else f"{count:,}"


def describe(
    model: TrainableModel,
    spec,
    config: TrainConfig,
    runtime: Runtime,
    name: str,
    streams: tuple[int, int] | None = None,
) -> list[str]:
    """The derived quantities printed at start; ``streams``: the encoder and decoder lengths
    of packed PrefixLM rows."""
    trainable, frozen = parameter_counts(model)
    sequences = config.batch_size * config.accumulate * runtime.world_size
    optim = config.optim
    warmup = int(round(optim.warmup * config.steps))
    processes = "1 process" if runtime.world_size == 1 else f"{runtime.world_size} processes"
    parallel = "" if runtime.strategy == "none" else f" ({runtime.strategy})"
    lines = [
        f"{name}: {_millions(trainable)} parameters trainable, {_millions(frozen)} frozen",
        f"{processes} on {runtime.kind}{parallel}, precision {runtime.precision}",
        f"per step: {config.batch_size} sequences x {config.accumulate} accumulation x "
        f"{processes} = {sequences:,} sequences, {sequences * spec.seq_len:,} tokens "
        f"(seq_len {spec.seq_len})"
        if streams is None
        else f"{processes} = {sequences:,} rows, {sequences * sum(streams):,} tokens "
        f"(encoder {streams[0]} + decoder {streams[1]}, packed)",
        f"{config.steps:,} steps, AdamW lr {optim.lr:g} ({warmup:,} warmup steps, "
        f"{optim.decay} decay), weight decay {optim.weight_decay:g}, clip {optim.clip_norm:g}",
    ]
    if spec.image_token_id is not None:
        lines.append(
            f"images: {model.tokens_per_image} tokens each, up to {spec.max_images} per "
            f"sequence, from {model.image_source}"
        )
    if config.output is not None:
        lines.append(
            f"checkpoints: every {config.checkpoint_every:,} steps to {config.output} "
            f"(keeping {config.keep_checkpoints})"
        )
    else:
        lines.append("checkpoints: none, nothing is saved (no --output)")
    return lines


class Meter:
    """Tokens, images, FLOPs and losses since the last log line; the clock is injected. Counts
    stay tensors on the device until a line is printed, so a step never waits for the device.

    ``peak_flops`` (all processes together) turns the FLOPs into MFU; ``memory`` gives the
    line's memory figure:

    >>> ticks = iter([0.0, 2.0])
    >>> meter = Meter(lambda: next(ticks), peak_flops=1e9, memory=lambda: "mem 1.50 GiB")
    >>> meter.add(torch.tensor(2.5), tokens=1000, images=4, flops=6e8)
    >>> meter.line(1, 10, 1e-3, terminal=False)[0]
    'step 1/10  loss 2.5000  lr 1.00e-03  tokens/s 500  images/s 2.0  mfu 30.0%  mem 1.50 GiB'
    """

    def __init__(
        self,
        clock: Callable[[], float],
        peak_flops: float | None = None,
        memory: Callable[[], str] = str,
    ):
        self.clock, self.peak_flops, self.memory = clock, peak_flops, memory
        self.since = clock()
        self.tokens: torch.Tensor | float = 0
        self.images: torch.Tensor | float = 0
        self.flops: torch.Tensor | float = 0
        self.pending: list[torch.Tensor] = []

    def add(self, loss: torch.Tensor, tokens, images, flops=0) -> None:
        self.pending.append(loss)
        self.tokens = self.tokens + tokens
        self.images = self.images + images
        self.flops = self.flops + flops

    def line(self, step: int, steps: int, lr: float, terminal: bool) -> tuple[str, list[float]]:
        losses = [float(loss) for loss in self.pending]
        now = self.clock()
        seconds = max(now - self.since, 1e-9)
        tokens, images = float(self.tokens), float(self.images)
        text = (
            f"step {step:,}/{steps:,}  loss {sum(losses) / len(losses):.4f}  lr {lr:.2e}  "
            f"tokens/s {tokens / seconds:,.0f}  images/s {images / seconds:,.1f}"
        )
        if self.peak_flops:
            text += f"  mfu {100 * float(self.flops) / seconds / self.peak_flops:.1f}%"
        memory = self.memory()
        if memory:
            text += f"  {memory}"
        if terminal:
            done = int(30 * step / steps)
            text += f"  [{'#' * done}{'.' * (30 - done)}] {100 * step // steps}%"
        self.since, self.tokens, self.images, self.flops, self.pending = now, 0, 0, 0, []
        return text, losses


def fit(
    model: TrainableModel,
    loader,
    config: TrainConfig,
    runtime: Runtime,
    *,
    name: str,
    settings: dict[str, Any] | None = None,
    stream: TextIO | None = None,
    clock: Callable[[], float] = time.monotonic,
    init: str | None = None,
) -> Result:
    """Train ``model`` (unwrapped, on the CPU or partly on the meta device) on ``loader``'s
    batches for ``config.steps``; ``init`` is a checkpoint whose trained weights it starts
    from (``--init``)."""
    stream = stream or sys.stdout

    def say(text: str) -> None:
        if runtime.is_main:
            stream.write(text + "\n")
            stream.flush()

    spec = loader.spec
    check_model(model, spec)
    check_attention(model, runtime, config.compile)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    if config.compile:  # each layer alone, as torchtitan does: one graph, reused by every layer
        for layer in model.shard_layers():
            layer.compile()
    wrapped = runtime.wrap(
        model,
        config.strategy,
        layers=model.shard_layers(),
        fsdp_preferred=model.fsdp_preferred,
    )
    model.materialize(runtime.device)  # a meta-device LM, now sharded, reads its weights
    if init is not None:
        say(f"initialised {checkpoint.init_weights(model, init)} tensors from {init}")
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = make_optimizer(model, config.optim)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule(config.optim, config.steps))

    step, saved = 0, None
    if config.output is not None:
        found = checkpoint.latest(config.output)
        if found is not None and not config.resume:
            raise ConfigError(
                f"{config.output} already holds checkpoints (latest {found}): pass --resume to "
                "continue that run, or another --output"
            )
        if found is not None:
            step = checkpoint.load(
                found,
                model=model,
                optimizer=optimizer,
                scheduler=scheduler,
                loader=loader,
                runtime=runtime,
            )
            say(f"resumed from {found} at step {step:,}")
            if step >= config.steps:
                say(f"step {step:,} is already --steps {config.steps:,}: nothing to train")
        elif config.resume:
            say(f"no checkpoint in {config.output} yet: starting at step 0")
    data = getattr(loader, "config", None)
    streams = (data.encoder_len, data.decoder_len) if getattr(data, "packed", False) else None
    for line in describe(model, spec, config, runtime, name, streams):
        say(line)

    first_step = step
    losses: list[float] = []
    peak = config.peak_tflops * 1e12 if config.peak_tflops else runtime.peak_flops()
    meter = Meter(clock, peak * runtime.world_size if peak else None, runtime.memory)
    terminal = runtime.is_main and stream.isatty()
    batches = runtime.batches(loader)
    checked = False
    while step < config.steps:
        try:
            micro = [next(batches) for _ in range(config.accumulate)]
        except StopIteration:  # the loaders are endless; a finite iterable ran out
            raise RuntimeError(f"the data stream ended after {step:,} steps") from None
        if not checked:
            check_batch(model, micro[0], spec)
            checked = True
        counts = torch.stack(
            [
                sum(model.count_targets(b).long() for b in micro),
                sum(real_tokens(b) for b in micro),
                sum(b["image_mask"].sum() for b in micro),
                sum(model.step_flops(b) for b in micro),
            ]
        ).to(runtime.device)
        counts = runtime.all_reduce_sum(counts)
        targets = counts[0].clamp(min=1).float()
        step_loss = torch.zeros((), device=runtime.device)
        for index, batch in enumerate(micro):
            batch = runtime.to_device(batch)
            with runtime.accumulating(wrapped, sync=index == len(micro) - 1):
                with runtime.autocast():
                    loss_sum = wrapped(batch)
                (loss_sum * (runtime.world_size / targets)).backward()
            step_loss += loss_sum.detach()
        torch.nn.utils.clip_grad_norm_(params, config.optim.clip_norm)
        lr = scheduler.get_last_lr()[0]
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        runtime.step_done()
        step += 1
        loss = runtime.all_reduce_sum(step_loss) / targets
        meter.add(loss, counts[1], counts[2], counts[3])
        if step % config.log_every == 0 or step == config.steps:
            text, logged = meter.line(step, config.steps, lr, terminal)
            losses += logged
            say(text)
        if config.output is not None and (
            step % config.checkpoint_every == 0 or step == config.steps
        ):
            saved = checkpoint.save(
                config.output,
                step,
                model=wrapped if runtime.strategy == "ddp" else model,
                optimizer=optimizer,
                scheduler=scheduler,
                loader=runtime.consumed(loader),
                runtime=runtime,
                trainable=trainable,
                settings=settings or {},
                keep=config.keep_checkpoints,
            )
            say(f"checkpoint: {saved}")
    counters = getattr(loader, "counters", None) or {}
    read = [f"{counters[k]:,} {k.replace('_', ' ')}" for k in READ_COUNTERS if k in counters]
    if read:  # skipped shards were each named in a warning as they happened
        say("data read by the first process: " + ", ".join(read))
    return Result(losses, first_step, step, saved, model)


LoaderFactory = Callable[..., Any]


def data_loaders(data) -> LoaderFactory:
    """``make_loader`` for :func:`run` from a ``trainer.loader.DataConfig``: the loader of each
    rank, preparing images as the model wants them."""
    from trainer.loader import Loader

    def make_loader(
        *, objective, batch_size, seed, image_size, image_mean, image_std, rank, world_size
    ):
        config = dataclasses.replace(
            data,
            objective=objective,
            batch_size=batch_size,
            seed=seed,
            image_size=(image_size, image_size),
            image_mean=tuple(image_mean),
            image_std=tuple(image_std),
        )
        return Loader(config, rank=rank, world_size=world_size)

    return make_loader


def run(
    model_config: PrefixLMConfig | VilaConfig,
    config: TrainConfig,
    data,
    *,
    stream: TextIO | None = None,
    clock: Callable[[], float] = time.monotonic,
    runtime: Runtime | None = None,
) -> Result:
    """Start the runtime, the data and the model, then :func:`fit`.

    ``data`` is a ``trainer.loader.DataConfig`` (its objective, batch size, seed and image
    settings are set here from the model and ``config``), or any ``make_loader(objective=,
    batch_size=, seed=, image_size=, image_mean=, image_std=, rank=, world_size=)`` that
    returns a stream with ``Loader``'s interface. A ``runtime`` given is the caller's to
    close (its process group outlives the run).
    """
    make_loader = data if callable(data) else data_loaders(data)
    owned = runtime is None
    runtime = runtime or start(config.device, config.precision)
    try:
        torch.manual_seed(config.seed)  # the same initial weights on every rank
        entry = registry.model(model_config.model)
        loaders = []

        def open_data(images: Images):
            loaders.append(
                make_loader(
                    objective=entry.objective,
                    batch_size=config.batch_size,
                    seed=config.seed,
                    image_size=images.size,
                    image_mean=images.mean,
                    image_std=images.std,
                    rank=runtime.rank,
                    world_size=runtime.world_size,
                )
            )
            return loaders[0].spec

        # a model that FSDP2 will shard (VILA's LM) is built on the meta device, each rank
        # reading its part
        meta = runtime.resolve_strategy(config.strategy, fsdp_preferred=True) == "fsdp"
        model = entry.build(model_config, open_data, meta=meta)
        (loader,) = loaders
        torch.manual_seed(config.seed + 1 + runtime.rank)  # dropout differs across ranks
        spec = loader.spec
        settings = {
            "model": dataclasses.asdict(model_config),
            "train": dataclasses.asdict(config),
            # what rebuilds the model from its checkpoint (trainer.export)
            "data": {
                "vocab_size": spec.vocab_size,
                "seq_len": spec.seq_len,
                "image_token_id": spec.image_token_id,
            },
        }
        return fit(
            model,
            loader,
            config,
            runtime,
            name=entry.title(model_config),
            settings=settings,
            stream=stream,
            clock=clock,
            init=model_config.init,
        )
    finally:
        if owned:
            runtime.close()
