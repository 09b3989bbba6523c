"""Configurations: the papers' settings, a smoke variant, one-line refusals."""

import dataclasses

import pytest

from trainer.config import (
    ConfigError,
    prefixlm_config,
    prefixlm_optim,
    smoke,
    train_config,
    vila_config,
    vila_optim,
)


def test_configurations_are_frozen():
    config = prefixlm_config("tiny")
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.width = 10  # type: ignore[misc]


def test_the_papers_optimizer_settings():
    simvlm = prefixlm_optim()
    assert (simvlm.lr, simvlm.warmup, simvlm.decay, simvlm.weight_decay) == (
        5e-4,
        0.02,
        "linear",
        0.01,
    )
    assert simvlm.betas == (0.9, 0.999) and simvlm.clip_norm == 1.0
    assert (vila_optim(0).lr, vila_optim(1).lr, vila_optim(1).decay) == (1e-3, 5e-5, "cosine")


def test_smoke_keeps_the_model_and_shrinks_the_run():
    config = train_config(steps=100_000, batch_size=64, accumulate=8, output="out")
    small = smoke(config)
    assert (small.steps, small.batch_size, small.accumulate) == (20, 2, 1)
    assert small.output == "out" and small.optim == config.optim


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: train_config(steps=0, batch_size=1), "steps must be at least 1, got 0"),
        (lambda: train_config(steps=1, batch_size=1, precision="fp16"), "unknown precision"),
        (lambda: train_config(steps=1, batch_size=1, device="tpu"), "unknown device 'tpu'"),
        (lambda: train_config(steps=1, batch_size=1, resume=True), "resume needs an output"),
        (lambda: prefixlm_optim(warmup=1.5), "warmup is a fraction of the steps"),
        (lambda: vila_config("lm", "ViT-B-32", None, stage=2), "stage must be 0"),
        (lambda: vila_config("lm", "ViT-B-32", None, projector="qformer"), "unknown projector"),
        (lambda: prefixlm_config("tiny", heads=3), "width 64 is not a multiple of heads 3"),
        (lambda: prefixlm_config("tiny", stem_stages=4), "stem_stages must be 1, 2 or 3"),
    ],
)
def test_a_setting_that_cannot_work_is_refused_in_one_line(make, message):
    with pytest.raises(ConfigError, match=message) as raised:
        make()
    assert "\n" not in str(raised.value)
