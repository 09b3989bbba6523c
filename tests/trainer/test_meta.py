"""An LM built on the meta device, sharded by FSDP2 across two gloo processes, each reading
only its rows: the weights of a plain load, half the memory each, bf16 compute under the
mixed-precision policy with fp32 master weights and gradients."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from tests.helpers import REPO

pytestmark = pytest.mark.slow


def two_ranks(spec: dict, out) -> list[dict]:
    path = out / "spec.json"
    path.write_text(json.dumps({**spec, "out": str(out)}))
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
        + ["-m", "tests.trainer.meta_worker", str(path)],
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return [torch.load(out / f"rank{rank}.pt") for rank in (0, 1)]


def test_two_processes_load_their_halves_of_the_weights_of_a_plain_load(tiny_lm, tmp_path):
    ranks = two_ranks({"lm": tiny_lm, "precision": "bf16", "forward": True}, tmp_path)
    assert ranks[0]["equal"] and ranks[0]["buffers_equal"]  # gathered: a plain load's tensors
    for rank in ranks:
        assert rank["strategy"] == "fsdp"
        assert rank["local_elements"] * 2 == rank["elements"]  # each holds half
        assert rank["peak"] <= 4 * rank["local_elements"] * 1.05  # and allocated about that
        # the mixed-precision policy: bf16 compute, fp32 master weights and gradients
        assert rank["compute_dtype"] == "torch.bfloat16"
        assert rank["dtypes"] == rank["grad_dtypes"] == ["torch.float32"]


def test_the_peak_host_memory_of_each_process_is_within_its_bf16_size_and_a_half(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=32000,
        hidden_size=768,
        intermediate_size=2048,
        num_hidden_layers=8,
        num_attention_heads=12,
        max_position_embeddings=512,
    )
    lm_path = str(tmp_path / "llama-100m")
    LlamaForCausalLM(config).save_pretrained(lm_path)  # float32 safetensors, about 425 MB
    ranks = two_ranks({"lm": lm_path}, tmp_path)
    parameters = ranks[0]["elements"]
    assert 100e6 < parameters < 110e6
    bf16_size = 2 * parameters
    assert ranks[0]["equal"]
    for rank in ranks:  # allocated by torch at the peak, and the resident set's growth
        assert rank["peak"] <= 1.5 * bf16_size, rank["peak"] / bf16_size
        assert sum(rank["resident"].values()) <= 1.5 * bf16_size, rank["resident"]
    print(  # the figures docs/trainer-models.md quotes
        f"bf16 size {bf16_size / 2**20:,.0f} MiB; per process allocated "
        f"{[round(r['peak'] / 2**20) for r in ranks]} MiB, resident grew "
        f"{[{k: round(v / 2**20) for k, v in r['resident'].items()} for r in ranks]} MiB"
    )
