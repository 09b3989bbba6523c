"""The runtime on this machine's CPU, and what it says where a device is missing."""

import pytest
import torch
from torch import nn

from trainer.config import ConfigError
from trainer.runtime import resolve_kind, start


def test_the_cpu_runtime_is_one_process_in_float32():
    runtime = start("cpu")
    assert (runtime.kind, runtime.world_size, runtime.rank, runtime.precision) == (
        "cpu",
        1,
        0,
        "fp32",
    )
    model = nn.Linear(3, 3)
    assert runtime.wrap(model) is model and runtime.strategy == "none"
    with runtime.autocast():
        assert model(torch.ones(1, 3)).dtype == torch.float32
    assert torch.equal(runtime.all_reduce_sum(torch.tensor([2, 3])), torch.tensor([2, 3]))


def test_bf16_autocast_when_asked_for():
    runtime = start("cpu", precision="bf16")
    with runtime.autocast():
        assert nn.Linear(3, 3)(torch.ones(1, 3)).dtype == torch.bfloat16


def test_the_random_state_comes_back():
    runtime = start("cpu")
    state = runtime.rng_state()
    drawn = torch.rand(4)
    runtime.set_rng_state(state)
    assert torch.equal(torch.rand(4), drawn)


def test_a_missing_device_is_one_line():
    if torch.cuda.is_available():
        assert resolve_kind("cuda") == "cuda"
    else:
        with pytest.raises(ConfigError, match="--device cuda: no CUDA device is available"):
            resolve_kind("cuda")
    try:
        import torch_xla  # noqa: F401
    except ImportError:
        with pytest.raises(ConfigError, match=r"torch_xla is not installed \(pip install"):
            resolve_kind("xla")
    else:
        assert resolve_kind("xla") == "xla"


def test_auto_takes_the_cpu_without_an_accelerator(monkeypatch):
    monkeypatch.delenv("PJRT_DEVICE", raising=False)
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_kind("auto") == expected
