"""Training throughput: our loop (``trainer.train.fit``) against the same model trained the
plain way (dense per-document masks, whole-logits loss, a bare PyTorch loop).

    python benchmarks/train.py                 # this CPU: tiny PrefixLM and tiny VILA
    python benchmarks/train.py --gpu           # CUDA: base PrefixLM and a 1B-class VILA
    python benchmarks/train.py --gpu --quick   # the GPU configurations shrunk, to try the script

Both sides train the same model (same initial weights) on the same synthetic
batches that follow the trainer contract (packed documents, the first of a
row with its images), with the same optimizer, clipping and precision (bf16
autocast on CUDA).

- **ours**: ``trainer.train.fit`` with the trainer's attention over packed
  documents (``--attention``: ``varlen`` by default, or ``flex``), the chunked
  loss, the global token count, the schedule and the log lines; ``--compile``
  compiles each layer (with ``flex``).
- **plain**: the model as plain ``transformers`` (and PrefixLM) code runs it:
  the dense ``[B, 1, L, L]`` per-document mask (``sdpa``; PrefixLM
  ``dense``), the loss over the whole ``[B, L, V]`` logits in float32, and
  ``loss = loss_sum / targets; loss.backward(); clip; step`` and nothing else.

A step's time is the interval between two batch draws (after
``torch.cuda.synchronize`` on a GPU), the median over the measured steps
after warm-up; both sides alternate ``--repeats`` times and the medians of
their medians are compared.

Reported per model and side: tokens/s (non-padding tokens), images/s, the
model FLOP utilisation (the model's training FLOPs, ``step_flops``: PaLM's
count over the packed documents, the same for both sides, over the step time
and the device's peak dense bf16 rate, ``--peak-tflops`` or from the device
name), and on CUDA the peak memory allocated (``torch.cuda.max_memory_allocated``).

The GPU models have random weights: PrefixLM ``base`` (SimVLM's 12+12 layers
at width 768, ResNet-50 stem, 224 px: 196 tokens per image, seq_len 512),
and VILA with a 1.1B Llama-architecture LM (TinyLlama's shape: 22 layers,
width 2048, vocabulary 32,000) and open_clip's ViT-L-14-336 (576 tokens per
image, seq_len 4096, four documents per row), stage 1 (projector and LM
train).
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[0] = ROOT  # not benchmarks/: its profile.py would hide the standard library's

import torch  # noqa: E402

from trainer.config import (  # noqa: E402
    prefixlm_config,
    prefixlm_optim,
    train_config,
    vila_config,
    vila_optim,
)
from trainer.runtime import start  # noqa: E402
from trainer.train import fit, make_optimizer  # noqa: E402


@dataclasses.dataclass(frozen=True)
class Spec:
    seq_len: int
    pad_id: int
    image_token_id: int
    tokens_per_image: int
    image_size: tuple[int, int]
    max_images: int
    tokenizer_sha256: str
    vocab_size: int


def synthetic_batches(objective, spec, count, batch_size, image_size, documents=2, seed=0):
    """``count`` contract batches: per row, a document with ``max_images`` images and text,
    then ``documents - 1`` text-only ones; 95% of each row is filled. The features are
    ``trainer.features``' (PrefixLM's cuts drawn with a seeded generator)."""
    from trainer import features

    rng = np.random.default_rng(seed)
    L, T, M = spec.seq_len, spec.tokens_per_image, spec.max_images
    batches = []
    for _ in range(count):
        input_ids = np.full((batch_size, L), spec.pad_id, np.int64)
        segment_ids = np.zeros((batch_size, L), np.int64)
        for row in range(batch_size):
            used = int(0.95 * L)
            input_ids[row, : M * T] = spec.image_token_id
            input_ids[row, M * T : used] = rng.integers(3, spec.vocab_size, used - M * T)
            # document boundaries: the first after the images, the others anywhere after it
            cuts = sorted(rng.choice(np.arange(M * T + 8, used - 8), documents - 1, replace=False))
            for number, (first, end) in enumerate(zip([0, *cuts], [*cuts, used]), 1):
                segment_ids[row, first:end] = number
        arrays = {
            "input_ids": input_ids,
            "segment_ids": segment_ids,
            "positions": features.document_positions(segment_ids),
        }
        if objective == "vila":
            arrays.update(features.vila_features(input_ids, segment_ids, spec.image_token_id))
        else:
            arrays.update(
                features.prefixlm_features(
                    input_ids, segment_ids, spec.image_token_id, spec.pad_id, rng=rng
                )
            )
        batch = {name: torch.from_numpy(array) for name, array in arrays.items()}
        batch["images"] = torch.from_numpy(
            rng.standard_normal((batch_size, M, 3, image_size, image_size), dtype=np.float32)
        )
        batch["image_mask"] = torch.ones(batch_size, M, dtype=torch.bool)
        batches.append(batch)
    return batches


class Timed:
    """``draws`` batches, cycling through ``batches``, with the time of every draw stamped:
    the interval between two draws is one whole step."""

    def __init__(self, batches, spec, draws, cuda):
        self.batches, self.spec, self.draws, self.cuda = batches, spec, draws, cuda
        self.stamps: list[float] = []

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass

    def __iter__(self):
        for index in range(self.draws):
            if self.cuda:
                torch.cuda.synchronize()
            self.stamps.append(time.perf_counter())
            yield self.batches[index % len(self.batches)]

    def step_times(self, warmup):
        return np.diff(self.stamps)[warmup:].tolist()


def whole_logits_loss(model, batch):
    """The loss as plain code computes it: every position's logits, upcast to float32."""
    import torch.nn.functional as F

    logits = model.logits(batch).float().flatten(0, 1)
    if model.objective == "vila":
        return F.cross_entropy(logits, batch["labels"].flatten(), reduction="sum")
    losses = F.cross_entropy(logits, batch["decoder_target_ids"].flatten(), reduction="none")
    return (losses * batch["decoder_loss_weights"].flatten()).sum()


def plain_loop(model, loader, optim, runtime):
    """The baseline: the same model, optimizer, clipping and precision, nothing else."""
    model = runtime.wrap(model)
    optimizer = make_optimizer(model, optim)
    params = [p for p in model.parameters() if p.requires_grad]
    for batch in loader:
        batch = runtime.to_device(batch)
        targets = model.count_targets(batch).clamp(min=1)
        with runtime.autocast():
            loss = whole_logits_loss(model, batch) / targets
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, optim.clip_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def peak_flops(given, runtime):
    if given:
        return given * 1e12
    if runtime.kind != "cuda":
        return None
    known = runtime.peak_flops()
    if known is None:
        raise SystemExit(f"unknown peak rate for {torch.cuda.get_device_name()}: --peak-tflops")
    return known


def measure(name, make_model, objective, spec, image_size, optim, args, runtime):
    """``make_model(spec, plain)``: the model for our side (``plain`` False) or the plain one."""
    cuda = runtime.kind == "cuda"
    batches = synthetic_batches(
        objective, spec, 4, args.batch_size, image_size, documents=args.documents
    )
    tokens = sum(int((b["segment_ids"] > 0).sum()) for b in batches) / len(batches)
    images = sum(int(b["image_mask"].sum()) for b in batches) / len(batches)
    times = {"ours": [], "plain": []}
    memory = {"ours": 0, "plain": 0}
    flops = None
    for _ in range(args.repeats):
        for side in ("ours", "plain"):
            torch.manual_seed(0)
            model = make_model(spec, side == "plain")
            if flops is None:
                flops = sum(float(model.step_flops(b)) for b in batches) / len(batches)
            draws = args.warmup + args.steps + 1
            loader = Timed(batches, spec, draws, cuda)
            if cuda:
                torch.cuda.reset_peak_memory_stats()
            if side == "ours":
                config = train_config(
                    steps=draws,
                    batch_size=args.batch_size,
                    optim=optim,
                    log_every=draws,
                    precision=runtime.precision,
                    compile=args.compile,
                )
                fit(model, loader, config, runtime, name=name, stream=io.StringIO())
            else:
                plain_loop(model, loader, optim, runtime)
            times[side].append(statistics.median(loader.step_times(args.warmup)))
            if cuda:
                memory[side] = max(memory[side], torch.cuda.max_memory_allocated())
            del model
            if cuda:
                torch.cuda.empty_cache()
    ours_s, plain_s = statistics.median(times["ours"]), statistics.median(times["plain"])
    result = {
        "model": name,
        "attention": args.attention,
        "batch": args.batch_size,
        "seq_len": spec.seq_len,
        "tokens_per_step": tokens,
        "images_per_step": images,
        "tflops_per_step": flops / 1e12,
        "step_s_ours": ours_s,
        "step_s_plain": plain_s,
        "tokens_per_s_ours": tokens / ours_s,
        "tokens_per_s_plain": tokens / plain_s,
        "images_per_s_ours": images / ours_s,
        "ratio_ours_over_plain": plain_s / ours_s,  # throughput ratio
    }
    peak = peak_flops(args.peak_tflops, runtime)
    if peak:
        result["mfu_ours"] = flops / ours_s / peak
        result["mfu_plain"] = flops / plain_s / peak
    if cuda:
        result["peak_gib_ours"] = memory["ours"] / 2**30
        result["peak_gib_plain"] = memory["plain"] / 2**30
    return result


def tiny_models(directory):
    """A tiny Llama config and a tiny open_clip config, written to ``directory``."""
    from transformers import LlamaConfig

    lm = os.path.join(directory, "tiny-llama")
    LlamaConfig(
        vocab_size=1000,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
    ).save_pretrained(lm)
    vision = os.path.join(directory, "bench-tiny-clip.json")
    with open(vision, "w") as handle:
        json.dump(
            {
                "embed_dim": 32,
                "vision_cfg": {
                    "image_size": 32,
                    "layers": 2,
                    "width": 64,
                    "patch_size": 8,
                    "head_width": 32,
                },
                "text_cfg": {
                    "context_length": 16,
                    "vocab_size": 49408,
                    "width": 32,
                    "heads": 2,
                    "layers": 2,
                },
            },
            handle,
        )
    return lm, vision


def billion_lm(directory, quick, seq_len):
    """A TinyLlama-shaped Llama (1.1B parameters) as a config: random weights."""
    from transformers import LlamaConfig

    path = os.path.join(directory, "llama-1b")
    LlamaConfig(
        vocab_size=32000,
        hidden_size=2048,
        intermediate_size=5632,
        num_hidden_layers=2 if quick else 22,
        num_attention_heads=32,
        num_key_value_heads=4,
        max_position_embeddings=seq_len,
    ).save_pretrained(path)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", action="store_true", help="base PrefixLM and 1B VILA on CUDA")
    parser.add_argument("--quick", action="store_true", help="shrink the GPU models (2 layers)")
    parser.add_argument("--device", default=None, help="default: cuda with --gpu, else cpu")
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--steps", type=int, default=None, help="measured steps per run")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--documents", type=int, default=None, help="packed documents per row")
    parser.add_argument("--attention", choices=["varlen", "flex"], default="varlen")
    parser.add_argument("--compile", action="store_true", help="ours: compile each layer (flex)")
    parser.add_argument("--peak-tflops", type=float, default=None)
    parser.add_argument("--only", choices=["prefixlm", "vila"], default=None)
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args()
    device = args.device or ("cuda" if args.gpu else "cpu")
    runtime = start(device)
    from trainer.models.prefixlm import PrefixLM
    from trainer.models.vila import build_vila

    results = []
    with tempfile.TemporaryDirectory() as directory:
        if args.gpu:
            args.steps = args.steps or 20
            args.documents = args.documents or 4
            sizes = {"prefixlm": args.batch_size or 32, "vila": args.batch_size or 2}
            prefix = prefixlm_config(
                "base", **({"encoder_layers": 2, "decoder_layers": 2} if args.quick else {})
            )
            prefix_spec = Spec(512, 0, 32000, prefix.tokens_per_image, (224, 224), 1, "", 32000)
            lm = billion_lm(directory, args.quick, 4096)
            vila = vila_config(lm, "ViT-L-14-336", None, stage=1)
            vila_spec = Spec(4096, 0, 32000, 576, (336, 336), 2, "", 32000)
            vila_name = "VILA 1.1B Llama + ViT-L-14-336, stage 1"
        else:
            args.steps = args.steps or 10
            args.documents = args.documents or 4
            sizes = {"prefixlm": args.batch_size or 4, "vila": args.batch_size or 4}
            prefix = prefixlm_config("tiny")
            prefix_spec = Spec(256, 0, 1000, 16, (64, 64), 2, "", 1000)
            lm, vision = tiny_models(directory)
            vila = vila_config(lm, vision, None, stage=1)
            vila_spec = Spec(256, 0, 1000, 16, (32, 32), 2, "", 1000)
            vila_name = "VILA tiny, stage 1"
        if args.only in (None, "prefixlm"):
            args.batch_size = sizes["prefixlm"]

            def make_prefixlm(spec, plain):
                attention = "dense" if plain else args.attention
                return PrefixLM(
                    dataclasses.replace(prefix, attention=attention),
                    vocab_size=spec.vocab_size,
                    seq_len=spec.seq_len,
                    image_token_id=spec.image_token_id,
                )

            name = f"PrefixLM {prefix.size}" + (" (2+2 layers)" if args.quick else "")
            results.append(
                measure(
                    name,
                    make_prefixlm,
                    "prefixlm",
                    prefix_spec,
                    prefix.image_size,
                    prefixlm_optim(),
                    args,
                    runtime,
                )
            )
        if args.only in (None, "vila"):
            args.batch_size = sizes["vila"]

            def make_vila(spec, plain):
                attention = "sdpa" if plain else args.attention
                config = dataclasses.replace(vila, attn_implementation=attention)
                return build_vila(config, spec.image_token_id)

            size = make_vila(vila_spec, True).image_size
            results.append(
                measure(vila_name, make_vila, "vila", vila_spec, size, vila_optim(1), args, runtime)
            )
    where = torch.cuda.get_device_name() if runtime.kind == "cuda" else f"{os.cpu_count()} CPUs"
    print(f"device: {where}; load average {os.getloadavg()[0]:.2f}")
    for r in results:
        line = (
            f"{r['model']}: batch {r['batch']} x seq_len {r['seq_len']}, "
            f"{r['tflops_per_step']:,.2f} TFLOP per step; ours ({r['attention']}) "
            f"{r['tokens_per_s_ours']:,.0f} tokens/s, "
            f"{r['images_per_s_ours']:,.1f} images/s ({r['step_s_ours'] * 1000:,.1f} ms/step); "
            f"plain (dense masks, whole logits) {r['tokens_per_s_plain']:,.0f} tokens/s; "
            f"ratio {r['ratio_ours_over_plain']:.3f}"
        )
        if "mfu_ours" in r:
            line += f"; MFU ours {100 * r['mfu_ours']:.1f}%, plain {100 * r['mfu_plain']:.1f}%"
        if "peak_gib_ours" in r:
            line += (
                f"; peak memory ours {r['peak_gib_ours']:,.1f} GiB, "
                f"plain {r['peak_gib_plain']:,.1f} GiB"
            )
        print(line)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=1)


if __name__ == "__main__":
    main()
