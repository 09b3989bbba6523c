"""`corpora train prefixlm` and `corpora train vila` end to end, on a build made by
`corpora build`, as a user runs them."""

import os
import shutil
import subprocess
import sys

import pytest
import torch

from tests.helpers import REPO, run_cli
from tests.trainer.tiny import sample_build, tiny_lm, tiny_vision  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.slow, pytest.mark.integration]
pytest.importorskip("trainer.loader")  # the data side (trainer-data): the commands read through it


def test_prefixlm_smoke_trains_prints_and_checkpoints(sample_build, tmp_path):  # noqa: F811
    output = str(tmp_path / "run")
    result = run_cli(
        "train", "prefixlm", "--data", sample_build, "--smoke", "--lr", "3e-3", "--output", output
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "PrefixLM tiny: 0.5M parameters trainable, 0 frozen"
    assert "per step: 2 sequences x 1 accumulation x 1 process = 2 sequences, 192 tokens" in (
        result.stdout
    )
    steps = [line for line in lines if line.startswith("step ")]
    assert [line.split()[1] for line in steps] == ["5/20", "10/20", "15/20", "20/20"]
    losses = [float(line.split()[3]) for line in steps]
    assert losses[-1] < losses[0]
    latest = open(os.path.join(output, "checkpoints", "latest")).read()
    assert latest == "step-00000020"
    weights = torch.load(os.path.join(output, "checkpoints", latest, "model.pt"))
    assert weights["token_embedding.weight"].shape == (1000, 64)


def test_prefixlm_packs_its_streams_to_the_lengths_given(sample_build):  # noqa: F811
    result = run_cli(
        "train", "prefixlm", "--data", sample_build, "--smoke", "--lr", "3e-3",
        "--encoder-len", "96", "--decoder-len", "32",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "= 2 rows, 256 tokens (encoder 96 + decoder 32, packed)" in result.stdout
    losses = [
        float(line.split()[3]) for line in result.stdout.splitlines() if line.startswith("step ")
    ]
    assert len(losses) == 4 and losses[-1] < losses[0]


def test_a_tokens_per_image_mismatch_exits_2_with_one_line_before_any_step(
    sample_build,  # noqa: F811
):
    result = run_cli("train", "prefixlm", "--data", sample_build, "--size", "base", "--steps", "5")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "corpora: tokens_per_image mismatch: the data has 16 tokens per image, PrefixLM base "
        "(224 px, resnet50 stem stride 16, patch 1) makes 196 (rebuild with --tokens-per-image "
        "196, or change the model)"
    ]
    assert "step " not in result.stdout


def test_vila_stage_0_then_stage_1_from_its_projector(
    sample_build,  # noqa: F811
    tiny_lm,  # noqa: F811
    tiny_vision,  # noqa: F811
    tmp_path,
):
    common = [
        "--lm",
        tiny_lm,
        "--vision",
        tiny_vision.config,
        "--vision-pretrained",
        tiny_vision.checkpoint,
        "--data",
        sample_build,
        "--smoke",
    ]
    stage0 = str(tmp_path / "stage0")
    first = run_cli("train", "vila", "--stage", "0", *common, "--output", stage0)
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith("VILA stage 0: 4,160 parameters trainable")
    projector = torch.load(os.path.join(stage0, "checkpoints", "step-00000020", "model.pt"))
    assert sorted(projector) == ["projector.bias", "projector.weight"]
    stage1 = str(tmp_path / "stage1")
    second = run_cli("train", "vila", "--stage", "1", "--init", stage0, *common, "--output", stage1)
    assert second.returncode == 0, second.stderr
    assert f"initialised 2 tensors from {stage0}" in second.stdout
    assert "VILA stage 1:" in second.stdout
    trained = torch.load(os.path.join(stage1, "checkpoints", "step-00000020", "model.pt"))
    assert "lm.model.layers.0.mlp.up_proj.weight" in trained
    assert not any(name.startswith("vision.") for name in trained)


def _losses(stdout: str) -> dict[str, str]:
    return {
        line.split()[1]: line.split()[3] for line in stdout.splitlines() if line.startswith("step ")
    }


def test_resume_continues_step_for_step_and_an_output_with_checkpoints_needs_it(
    sample_build,  # noqa: F811
    tmp_path,
):
    whole = str(tmp_path / "whole")
    flags = ["train", "prefixlm", "--data", sample_build, "--size", "tiny", "--batch-size", "2"]
    flags += ["--steps", "6", "--log-every", "1", "--checkpoint-every", "2", "--workers", "1"]
    first = run_cli(*flags, "--keep-checkpoints", "5", "--output", whole)
    assert first.returncode == 0, first.stderr
    again = run_cli(*flags, "--output", whole)
    assert again.returncode == 2
    assert "already holds checkpoints" in again.stderr and "pass --resume" in again.stderr
    # what a run killed after its step-4 checkpoint leaves behind
    stopped = str(tmp_path / "stopped")
    shutil.copytree(whole, stopped)
    shutil.rmtree(os.path.join(stopped, "checkpoints", "step-00000006"))
    with open(os.path.join(stopped, "checkpoints", "latest"), "w") as handle:
        handle.write("step-00000004")
    resumed = run_cli(*flags, "--output", stopped, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert "step-00000004 at step 4" in resumed.stdout
    assert _losses(resumed.stdout) == {
        step: loss for step, loss in _losses(first.stdout).items() if step in ("5/6", "6/6")
    }
    ours, theirs = (
        torch.load(os.path.join(run, "checkpoints", "step-00000006", "model.pt"))
        for run in (stopped, whole)
    )
    for name, value in theirs.items():
        assert torch.equal(ours[name], value), name


@pytest.mark.parametrize(
    "flags, message",
    [
        (["prefixlm"], "corpora: --steps is required (or --smoke)"),
        (["prefixlm", "--smoke", "--image-size", "70"], "corpora: image size 70 is not a multiple"),
        (
            ["vila", "--stage", "1", "--smoke", "--lm", "/no/such/lm", "--vision", "ViT-B-32"],
            "corpora: LM not found: /no/such/lm",
        ),
        (  # --smoke's tiny models are its defaults; without it a run names its own
            ["vila", "--stage", "0", "--steps", "1"],
            "corpora: --lm is required (or --smoke: a tiny model of random weights)",
        ),
    ],
)
def test_bad_settings_exit_2_with_one_line(sample_build, flags, message):  # noqa: F811
    result = run_cli("train", *flags[:1], "--data", sample_build, *flags[1:])
    assert result.returncode == 2
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith(message)


def test_torchrun_starts_two_processes_that_train_together(sample_build, tmp_path):  # noqa: F811
    output = str(tmp_path / "run")
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
        + ["-m", "cli.main", "train", "prefixlm", "--data", sample_build, "--smoke"]
        + ["--device", "cpu", "--output", output],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "2 processes on cpu (ddp), precision fp32" in result.stdout
    assert "x 2 processes = 4 sequences" in result.stdout
    saved = os.path.join(output, "checkpoints", "step-00000020")
    # two processes write a Distributed Checkpoint, each its part, nothing gathered whole
    written = set(os.listdir(saved))
    assert {"data-rank00000.pt", "data-rank00001.pt", "dcp", "state.json"} <= written
    assert "model.pt" not in written


# Issue 32, finding 5: --smoke overrode --steps (3 ran 20; a resume to 25 ran none,
# silently), and a run without --output saved nothing without a word.
def test_smoke_sets_defaults_and_never_overrides_a_flag_given(sample_build, tmp_path):  # noqa: F811
    output = str(tmp_path / "run")
    common = ["train", "prefixlm", "--data", sample_build, "--smoke", "--log-every", "1"]
    short = run_cli(*common, "--steps", "3", "--output", output)
    assert short.returncode == 0, short.stderr
    assert list(_losses(short.stdout)) == ["1/3", "2/3", "3/3"]
    resumed = run_cli(*common, "--steps", "5", "--resume", "--output", output)
    assert resumed.returncode == 0, resumed.stderr
    assert list(_losses(resumed.stdout)) == ["4/5", "5/5"]
    done = run_cli(*common, "--steps", "5", "--resume", "--output", output)
    assert "step 5 is already --steps 5: nothing to train" in done.stdout


def test_a_run_without_output_says_nothing_is_saved(sample_build):  # noqa: F811
    result = run_cli("train", "prefixlm", "--data", sample_build, "--smoke", "--steps", "1")
    assert result.returncode == 0, result.stderr
    assert "checkpoints: none, nothing is saved (no --output)" in result.stdout.splitlines()


# Issue 32, finding 4: `train prefixlm --smoke` on the README's first build stopped on a
# tokens_per_image mismatch without saying which build a --smoke run wants.
def test_a_smoke_run_on_a_full_size_build_names_the_smoke_build(tmp_path):
    output = str(tmp_path / "mmc4-pairs")
    built = run_cli("build", "mmc4-pairs", "--output", output, "--progress-every", "0")
    assert built.returncode == 0, built.stderr
    result = run_cli("train", "prefixlm", "--data", output, "--smoke")
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("corpora: tokens_per_image mismatch: the data has 576 tokens per image")
    assert line.endswith("; --smoke's models take a --smoke build (corpora build CORPUS --smoke)")
