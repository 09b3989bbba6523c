"""`corpora train export`: a trained run's checkpoint, written out and read back, gives the
trained model's logits (the LM through plain transformers, VILA and PrefixLM whole)."""

from __future__ import annotations

import io
import json
import os

import pytest
import torch
from click.testing import CliRunner

from cli.main import cli
from tests.trainer.contract import IMAGE, prefixlm_batch, vila_batch
from tests.trainer.test_train import Loaders
from trainer.config import ConfigError, prefixlm_config, train_config, vila_config, vila_optim
from trainer.export import export, load_prefixlm, load_vila
from trainer.loader import Loader, data_config
from trainer.train import run

pytestmark = pytest.mark.slow

DOC_A = [IMAGE, 3, 4, 5, 6, 7]
DOC_B = [8, 9, 10, 11, 12]


def image_token_id(build):
    return Loader(data_config([build], num_workers=0)).spec.image_token_id


def trained_vila(build, tiny_lm, tiny_vision, output, stage=1):
    model = vila_config(tiny_lm, tiny_vision.config, tiny_vision.checkpoint, stage=stage)
    config = train_config(
        steps=2, batch_size=2, optim=vila_optim(stage, lr=1e-2), output=str(output)
    )
    return run(model, config, Loaders(build), stream=io.StringIO()).model.eval()


def export_with_the_cli(checkpoint, output):
    result = CliRunner().invoke(cli, ["train", "export", str(checkpoint), "--output", str(output)])
    assert result.exit_code == 0, result.output
    return result.output


def test_the_exported_vila_lm_loads_with_automodel_and_gives_the_same_text_logits(
    sample_build, tiny_lm, tiny_vision, tmp_path
):
    from transformers import AutoModelForCausalLM

    trained = trained_vila(sample_build, tiny_lm, tiny_vision, tmp_path / "run")
    printed = export_with_the_cli(tmp_path / "run", tmp_path / "out")
    assert printed.strip() == f"Exported VILA stage 1 to {tmp_path / 'out'}"
    lm = AutoModelForCausalLM.from_pretrained(str(tmp_path / "out" / "llm")).eval()
    ids = torch.tensor([[1, 5, 9, 200, 31, 7, 77, 3]])
    with torch.no_grad():
        theirs = lm(input_ids=ids).logits
        ours = trained.lm(input_ids=ids).logits
        # and the trained model's own path (one text document, varlen attention)
        batch = vila_batch([[ids[0].tolist()]], seq_len=8, tokens_per_image=16,
                           image_token_id=image_token_id(sample_build))  # fmt: skip
        through_vila = trained.logits(batch)
    torch.testing.assert_close(theirs, ours, rtol=0, atol=1e-5)
    torch.testing.assert_close(theirs, through_vila, rtol=0, atol=1e-5)
    initial = AutoModelForCausalLM.from_pretrained(tiny_lm).eval()
    with torch.no_grad():
        assert not torch.allclose(initial(input_ids=ids).logits, theirs, atol=1e-4)  # trained


def test_the_exported_vila_reloads_whole_in_its_layout(
    sample_build, tiny_lm, tiny_vision, tmp_path
):
    trained = trained_vila(sample_build, tiny_lm, tiny_vision, tmp_path / "run", stage=0)
    export(str(tmp_path / "run"), str(tmp_path / "out"))
    out = tmp_path / "out"
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["LlavaLlamaModel"]
    assert (config["llm_cfg"], config["mm_projector_cfg"], config["vision_tower_cfg"]) == (
        "llm", "mm_projector", "vision_tower",
    )  # fmt: skip
    assert (config["mm_vision_select_layer"], config["tokens_per_image"]) == (-2, 16)
    assert json.loads((out / "llm" / "config.json").read_text())["model_type"] == "llama"
    from safetensors.torch import load_file

    assert set(load_file(str(out / "mm_projector" / "model.safetensors"))) == {
        "layers.weight",
        "layers.bias",
    }
    loaded = load_vila(str(out))
    torch.testing.assert_close(loaded.projector.weight, trained.projector.weight, rtol=0, atol=0)
    image = image_token_id(sample_build)
    batch = vila_batch([[DOC_A, DOC_B], [DOC_B, DOC_A, DOC_A]], seq_len=64, tokens_per_image=16,
                       image_token_id=image, max_images=2)  # fmt: skip
    with torch.no_grad():
        torch.testing.assert_close(loaded.logits(batch), trained.logits(batch), rtol=0, atol=1e-5)


def test_the_exported_prefixlm_reloads_with_its_config(sample_build, tmp_path):
    config = train_config(steps=2, batch_size=2, output=str(tmp_path / "run"))
    trained = run(
        prefixlm_config("tiny"), config, Loaders(sample_build), stream=io.StringIO()
    ).model.eval()
    printed = export_with_the_cli(
        tmp_path / "run" / "checkpoints" / "step-00000002", tmp_path / "out"
    )
    assert printed.startswith("Exported PrefixLM tiny")
    saved = json.loads((tmp_path / "out" / "config.json").read_text())
    assert (saved["width"], saved["vocab_size"], saved["seq_len"]) == (64, 1000, 96)
    loaded = load_prefixlm(str(tmp_path / "out"))
    image = image_token_id(sample_build)
    batch = prefixlm_batch([[DOC_A, DOC_B], [DOC_B, DOC_A]], [[2, 1], [3, 1]], seq_len=96,
                           tokens_per_image=16, image_token_id=image)  # fmt: skip
    with torch.no_grad():
        torch.testing.assert_close(loaded.logits(batch), trained.logits(batch), rtol=0, atol=0)


def test_a_directory_without_checkpoint_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match="no checkpoint at"):
        export(str(tmp_path), str(tmp_path / "out"))
    assert not os.path.exists(tmp_path / "out")
