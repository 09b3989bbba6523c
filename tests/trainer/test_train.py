"""The loop: tiny models train on a build made by `corpora build`; the loss is normalised by
the global token count; stop and resume continue step for step; bad settings stop before any
step; several processes keep identical weights."""

from __future__ import annotations

import dataclasses
import io
import json
import math
import os
import re
import shutil
import subprocess
import sys

import pytest
import torch

from tests.helpers import REPO
from tests.trainer.contract import Crashing, GlobalRows
from trainer import checkpoint
from trainer.config import (
    ConfigError,
    prefixlm_config,
    prefixlm_optim,
    train_config,
    vila_config,
    vila_optim,
)
from trainer.loader import data_config
from trainer.train import Meter, data_loaders, run, schedule

pytestmark = pytest.mark.slow


class Loaders:
    """``make_loader`` for :func:`run`: ``trainer.loader.Loader`` over ``build``, read in this
    process; it keeps the loaders it made, and ``crash_after`` batches makes the stream fail,
    as a dead node would."""

    def __init__(self, build: str, crash_after: int | None = None, **settings):
        self.made: list = []
        self.crash_after = crash_after
        self.make = data_loaders(data_config([build], num_workers=0, shuffle_buffer=8, **settings))

    def __call__(self, **options):
        loader = self.make(**options)
        self.made.append(loader)
        return loader if self.crash_after is None else Crashing(loader, self.crash_after)


def prefixlm_run(build, steps=30, **changes):
    config = train_config(steps=steps, batch_size=4, optim=prefixlm_optim(lr=3e-3), **changes)
    return run(prefixlm_config("tiny"), config, Loaders(build), stream=io.StringIO())


def test_the_schedule_warms_up_then_decays_to_the_final_fraction():
    linear = schedule(prefixlm_optim(warmup=0.1, final_lr_fraction=0.1), steps=100)
    assert [linear(s) for s in (0, 4, 9)] == [0.1, 0.5, 1.0]
    assert linear(10) == 1.0 and math.isclose(linear(55), 0.55) and linear(99) < 0.12
    cosine = schedule(vila_optim(1), steps=100)
    assert cosine(2) == 1.0 and math.isclose(cosine(50), 0.5 + 0.5 * math.cos(math.pi * 47 / 97))
    assert all(cosine(s) >= cosine(s + 1) for s in range(3, 99))


def test_tiny_prefixlm_trains_on_a_build_and_its_loss_falls(sample_build):
    result = prefixlm_run(sample_build, steps=30)
    assert len(result.losses) == 30 and result.steps == 30
    assert math.isclose(result.losses[0], math.log(1000), rel_tol=0.05)  # uniform over 1000
    assert sum(result.losses[-5:]) / 5 < 0.75 * result.losses[0]


def test_tiny_prefixlm_trains_on_rows_packed_to_encoder_and_decoder_lengths(sample_build):
    """The bundled sample, cut for PrefixLM, holds about 3 prefix tokens to 1 target token
    (images are all prefix): encoder rows of 96 and decoder rows of 32 (18 % and 24 %
    padding)."""
    loaders = Loaders(sample_build, encoder_len=96, decoder_len=32)
    config = train_config(steps=30, batch_size=4, optim=prefixlm_optim(lr=3e-3), log_every=1)
    printed = io.StringIO()
    result = run(prefixlm_config("tiny"), config, loaders, stream=printed)
    assert "4 rows, 512 tokens (encoder 96 + decoder 32, packed)" in printed.getvalue()
    assert math.isclose(result.losses[0], math.log(1000), rel_tol=0.05)
    assert sum(result.losses[-5:]) / 5 < 0.75 * result.losses[0]
    assert loaders.made[0].config.packed


def vila_run(build, tiny_lm, tiny_vision, stage, steps=20, **changes):
    model = vila_config(tiny_lm, tiny_vision.config, tiny_vision.checkpoint, stage=stage)
    config = train_config(steps=steps, batch_size=4, optim=vila_optim(stage, lr=3e-3), **changes)
    return run(model, config, Loaders(build), stream=io.StringIO())


def weights(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: value.detach().clone() for name, value in module.state_dict().items()}


def test_vila_stage_0_trains_only_the_projector(sample_build, tiny_lm, tiny_vision):
    from trainer.models.vila import build_vila

    torch.manual_seed(0)
    before = weights(
        build_vila(vila_config(tiny_lm, tiny_vision.config, tiny_vision.checkpoint, stage=0))
    )
    after = weights(vila_run(sample_build, tiny_lm, tiny_vision, stage=0, steps=5).model)
    changed = {name for name in before if not torch.equal(before[name], after[name])}
    assert changed == {"projector.weight", "projector.bias"}


def test_vila_stage_1_trains_the_lm_and_never_the_tower(sample_build, tiny_lm, tiny_vision):
    from trainer.models.vila import build_vila

    torch.manual_seed(0)
    before = weights(
        build_vila(vila_config(tiny_lm, tiny_vision.config, tiny_vision.checkpoint, stage=1))
    )
    result = vila_run(sample_build, tiny_lm, tiny_vision, stage=1, steps=25)
    after = weights(result.model)
    changed = {name for name in before if not torch.equal(before[name], after[name])}
    assert not any(name.startswith("vision.") for name in changed)
    assert "lm.model.layers.0.self_attn.q_proj.weight" in changed and "projector.weight" in changed
    assert sum(result.losses[-5:]) / 5 < 0.8 * result.losses[0]


def test_a_tokens_per_image_mismatch_stops_before_any_step(sample_build):
    loaders = Loaders(sample_build)
    config = train_config(steps=5, batch_size=2)
    with pytest.raises(ConfigError) as raised:
        run(prefixlm_config("tiny", patch_size=2), config, loaders, stream=io.StringIO())
    assert str(raised.value).startswith(
        "tokens_per_image mismatch: the data has 16 tokens per image, PrefixLM tiny (64 px, "
        "resnet18 stem stride 4, patch 2) makes 64"
    )
    assert "\n" not in str(raised.value)
    assert loaders.made[0].state_dict()["batches"] == 0  # not one batch was drawn


def test_the_loss_is_normalised_by_the_global_count_across_accumulation(
    sample_build, tiny_lm, tiny_vision
):
    """Two micro-batches of one sequence take the same step as one batch of two: the loss is
    the sum over both micro-batches' tokens divided by their total count. (VILA: its labels
    do not depend on how samples are grouped into batches; PrefixLM's cuts are drawn per
    batch.)"""
    model = vila_config(tiny_lm, tiny_vision.config, tiny_vision.checkpoint, stage=1)
    common = dict(optim=vila_optim(1, lr=3e-3), log_every=1)
    whole = run(
        model,
        train_config(steps=4, batch_size=2, **common),
        Loaders(sample_build),
        stream=io.StringIO(),
    )
    split = run(
        model,
        train_config(steps=4, batch_size=1, accumulate=2, **common),
        Loaders(sample_build),
        stream=io.StringIO(),
    )
    # each step's loss follows from the weights the steps before left: equal losses, equal steps
    assert whole.losses == pytest.approx(split.losses, rel=1e-6, abs=0)
    assert len(set(whole.losses)) == 4


def test_stop_and_resume_continue_with_the_same_losses_step_for_step(sample_build, tmp_path):
    uninterrupted = prefixlm_run(sample_build, steps=12, log_every=1)
    output = str(tmp_path / "run")
    config = train_config(
        steps=12,
        batch_size=4,
        optim=prefixlm_optim(lr=3e-3),
        log_every=1,
        output=output,
        checkpoint_every=4,
    )
    with pytest.raises(RuntimeError, match="the data node went away"):
        run(prefixlm_config("tiny"), config, Loaders(sample_build, crash_after=6))
    assert checkpoint.latest(output).endswith("step-00000004")
    printed = io.StringIO()
    resumed = run(
        prefixlm_config("tiny"),
        dataclasses.replace(config, resume=True),
        Loaders(sample_build),
        stream=printed,
    )
    assert resumed.first_step == 4 and "resumed from" in printed.getvalue()
    assert resumed.losses == uninterrupted.losses[4:]
    for (name, a), (_, b) in zip(
        uninterrupted.model.state_dict().items(), resumed.model.state_dict().items()
    ):
        assert torch.equal(a, b), name


def test_an_output_that_holds_checkpoints_is_not_overwritten(sample_build, tmp_path):
    output = str(tmp_path / "run")
    prefixlm_run(sample_build, steps=2, output=output, checkpoint_every=1)
    with pytest.raises(ConfigError, match="already holds checkpoints .* pass --resume"):
        prefixlm_run(sample_build, steps=2, output=output)


def test_the_start_names_the_derived_quantities_and_each_interval_prints_one_line(
    sample_build,
):
    printed = io.StringIO()
    config = train_config(steps=4, batch_size=2, accumulate=3, log_every=2)
    run(prefixlm_config("tiny"), config, Loaders(sample_build), stream=printed)
    lines = printed.getvalue().splitlines()
    assert lines[0].startswith("PrefixLM tiny: 0.5M parameters trainable, 0 frozen")
    assert lines[1] == "1 process on cpu, precision fp32"
    assert lines[2] == (
        "per step: 2 sequences x 3 accumulation x 1 process = 6 sequences, 576 tokens (seq_len 96)"
    )
    steps = [line for line in lines if line.startswith("step ")]
    assert [line.split()[1] for line in steps] == ["2/4", "4/4"]
    assert all("tokens/s" in line and "images/s" in line and "lr" in line for line in steps)


def test_a_log_line_reports_rates_from_the_injected_clock():
    now = [100.0]
    meter = Meter(lambda: now[0])
    meter.add(torch.tensor(2.0), tokens=3000, images=10)
    meter.add(torch.tensor(4.0), tokens=1000, images=10)
    now[0] = 102.0
    text, losses = meter.line(step=50, steps=100, lr=1e-3, terminal=True)
    assert losses == [2.0, 4.0]
    assert text == (
        "step 50/100  loss 3.0000  lr 1.00e-03  tokens/s 2,000  images/s 10.0  "
        "[###############...............] 50%"
    )


def test_the_log_line_gives_mfu_against_the_peak_given_and_the_memory(sample_build):
    printed = io.StringIO()
    config = train_config(steps=2, batch_size=2, log_every=1, peak_tflops=1.0)
    run(prefixlm_config("tiny"), config, Loaders(sample_build), stream=printed)
    steps = [line for line in printed.getvalue().splitlines() if line.startswith("step ")]
    assert len(steps) == 2
    assert all(re.search(r"  mfu \d+\.\d%  rss \d+\.\d\d GiB$", line) for line in steps), steps


def test_compile_and_attention_the_device_cannot_run_stop_before_any_step(sample_build):
    config = train_config(steps=2, batch_size=2, compile=True)
    with pytest.raises(ConfigError, match="--compile needs --attn-implementation flex"):
        run(prefixlm_config("tiny"), config, Loaders(sample_build), stream=io.StringIO())
    with pytest.raises(ConfigError, match="flex trains on CUDA only"):
        run(
            prefixlm_config("tiny", attention="flex"),
            train_config(steps=2, batch_size=2),
            Loaders(sample_build),
            stream=io.StringIO(),
        )


def test_compiled_layers_take_the_steps_the_uncompiled_ones_take(sample_build):
    losses = []
    for compiled in (False, True):
        config = train_config(steps=3, batch_size=2, log_every=1, compile=compiled)
        model = prefixlm_config("tiny", attention="dense")
        losses.append(run(model, config, Loaders(sample_build), stream=io.StringIO()).losses)
    assert losses[1] == pytest.approx(losses[0], rel=1e-5)


def torchrun(spec: dict, out, check=True):
    path = out / "spec.json"
    path.write_text(json.dumps({**spec, "out": str(out)}))
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
        + ["-m", "tests.trainer.ddp_worker", str(path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    if not check:
        return result
    assert result.returncode == 0, result.stderr[-3000:]
    return [torch.load(out / f"rank{rank}.pt") for rank in (0, 1)]


def test_two_gloo_processes_train_together_and_keep_identical_weights(sample_build, tmp_path):
    ranks = torchrun(
        {"model": "prefixlm", "build": sample_build, "strategy": "ddp", "steps": 6}, tmp_path
    )
    assert [rank["strategy"] for rank in ranks] == ["ddp", "ddp"]
    assert ranks[0]["losses"] == ranks[1]["losses"]  # the global loss, the same on both
    assert ranks[0]["losses"][-1] < ranks[0]["losses"][0]
    for name, value in ranks[0]["weights"].items():
        assert torch.equal(value, ranks[1]["weights"][name]), name


def test_fsdp2_shards_vila_takes_the_steps_ddp_takes_and_resumes(
    sample_build, tiny_lm, tiny_vision, tmp_path
):
    spec = {
        "model": "vila",
        "lm": tiny_lm,
        "vision": tiny_vision.config,
        "vision_checkpoint": tiny_vision.checkpoint,
        "build": sample_build,
        "steps": 4,
    }
    for name in ("ddp", "fsdp"):
        (tmp_path / name).mkdir()
    ddp = torchrun({**spec, "strategy": "ddp"}, tmp_path / "ddp")
    # FSDP2 stops after two steps and their checkpoint, then resumes from it
    fsdp = {**spec, "strategy": "fsdp", "output": str(tmp_path / "run"), "checkpoint_every": 2}
    crashed = torchrun({**fsdp, "crash_after": 3}, tmp_path / "fsdp", check=False)
    assert crashed.returncode != 0 and "the data node went away" in crashed.stderr
    assert checkpoint.latest(str(tmp_path / "run")).endswith("step-00000002")
    resumed = torchrun(fsdp, tmp_path / "fsdp")
    assert resumed[0]["strategy"] == "fsdp"
    assert resumed[0]["losses"] == pytest.approx(ddp[0]["losses"][2:], rel=1e-5)
    for name, value in ddp[0]["weights"].items():
        torch.testing.assert_close(resumed[0]["weights"][name], value, msg=name)
        assert torch.equal(resumed[0]["weights"][name], resumed[1]["weights"][name]), name


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_a_distributed_checkpoint_of_two_processes_resumes_on_one_and_on_two(
    sample_build, tmp_path, strategy
):
    # both ranks read their rows of the same 4-row global batches, so one process with
    # batches of 4 sees what two with batches of 2 see
    spec = {
        "model": "prefixlm",
        "build": sample_build,
        "strategy": strategy,
        "global_rows": 4,
        "global_batch": 4,
        "checkpoint_every": 2,
    }

    def on_two(name, output, **changes):
        (tmp_path / name).mkdir()
        return torchrun(
            {**spec, "steps": 4, "output": str(output), **changes}, tmp_path / name, check=False
        )

    whole = on_two("whole", tmp_path / "whole-run")
    # a run that stops after its step-2 checkpoint (the stream fails at the fourth batch)
    crashed = on_two("first", tmp_path / "run", crash_after=3)
    assert crashed.returncode != 0
    assert "the data node went away" in crashed.stderr, crashed.stderr[-3000:]
    saved = checkpoint.latest(str(tmp_path / "run"))
    assert saved.endswith("step-00000002")
    assert os.listdir(os.path.join(saved, "dcp"))  # every rank wrote its part; nothing whole
    assert not os.path.exists(os.path.join(saved, "model.pt"))
    shutil.copytree(tmp_path / "run", tmp_path / "run-one")

    # the weights two processes saved at their last step, loaded by one, are the weights
    # they ended with
    from trainer.models.prefixlm import PrefixLM

    whole = [torch.load(tmp_path / "whole" / f"rank{rank}.pt") for rank in (0, 1)]
    ended = whole[0]["weights"]
    model = PrefixLM(
        prefixlm_config("tiny"),
        vocab_size=1000,
        seq_len=96,
        image_token_id=whole[0]["image_token_id"],
    )
    assert checkpoint.init_weights(model, str(tmp_path / "whole-run")) == len(ended)
    for name, value in ended.items():
        assert torch.equal(model.state_dict()[name], value), name

    again = on_two("again", tmp_path / "run")
    assert again.returncode == 0, again.stderr[-3000:]
    again = [torch.load(tmp_path / "again" / f"rank{rank}.pt") for rank in (0, 1)]
    loaders = data_loaders(data_config([sample_build], num_workers=0, shuffle_buffer=8))
    config = train_config(
        steps=4,
        batch_size=4,
        optim=prefixlm_optim(lr=3e-3),
        log_every=1,
        checkpoint_every=2,
        output=str(tmp_path / "run-one"),
        resume=True,
    )
    one = run(
        prefixlm_config("tiny"),
        config,
        lambda **options: GlobalRows(loaders(**options), 0, 1, 4),
        stream=io.StringIO(),
    )
    assert one.first_step == 2 and len(again[0]["losses"]) == 2
    assert again[0]["losses"] == pytest.approx(whole[0]["losses"][2:], rel=1e-6)
    # one process sums the same token losses in another order than two: the losses equal
    # within 1e-6; the weights, after Adam's steps on those sums (FSDP2 also reduce-scatters
    # the gradients in its own order), within 1e-5 (1.24e-6 seen on one of 64 elements)
    assert one.losses == pytest.approx(again[0]["losses"], rel=1e-6)
    for name, value in again[0]["weights"].items():
        torch.testing.assert_close(one.model.state_dict()[name], value, rtol=0, atol=1e-5)


def test_a_distributed_checkpoint_resumes_the_loader_on_one_process(sample_build, tmp_path):
    """The real loader, saved by two processes (DDP, a Distributed Checkpoint), resumes on
    one: its streams start the next pass of the build and its counters go on."""
    output = tmp_path / "run"
    (tmp_path / "two").mkdir()
    spec = {"model": "prefixlm", "build": sample_build, "strategy": "ddp", "steps": 2}
    torchrun({**spec, "output": str(output), "checkpoint_every": 2}, tmp_path / "two")
    saved = checkpoint.latest(str(output))
    assert saved.endswith("step-00000002") and os.listdir(os.path.join(saved, "dcp"))
    loaders = Loaders(sample_build)
    config = train_config(
        steps=4,
        batch_size=2,
        optim=prefixlm_optim(lr=3e-3),
        log_every=1,
        output=str(output),
        resume=True,
    )
    printed = io.StringIO()
    result = run(prefixlm_config("tiny"), config, loaders, stream=printed)
    assert f"resumed from {saved} at step 2" in printed.getvalue()
    assert result.first_step == 2 and len(result.losses) == 2
    assert all(math.isfinite(loss) for loss in result.losses)
    (loader,) = loaders.made
    assert loader.counters["batches"] == 2 * 2 + 2  # the two ranks' batches, then its own
    (worker,) = loader.state_dict()["worker_states"]
    assert worker["blend"]["streams"][0]["pass"] >= 1
