"""VILA: a tiny Llama loaded from a saved directory, a tiny open_clip tower, the projector."""

import json

import pytest
import torch
import torch.nn.functional as F

from tests.trainer.contract import IMAGE, vila_batch
from tests.trainer.tiny import save_tiny_lm
from trainer.config import ConfigError, vila_config
from trainer.models.vila import build_vila, load_lm, load_vision

IMAGE_ID, SEQ_LEN = 1000, 64


def build(tiny_lm, tiny_vision, seed=0, **changes):
    torch.manual_seed(seed)
    config = vila_config(tiny_lm, tiny_vision.config, tiny_vision.checkpoint, **changes)
    return build_vila(config, image_token_id=IMAGE_ID).eval()


def batch(rows, **options):
    return vila_batch(
        rows,
        seq_len=SEQ_LEN,
        tokens_per_image=16,
        image_token_id=IMAGE_ID,
        image_size=32,
        **options,
    )


def test_the_lm_loads_from_its_directory_with_its_weights(tiny_lm):
    from transformers import AutoModelForCausalLM

    loaded = load_lm(tiny_lm)
    reference = AutoModelForCausalLM.from_pretrained(tiny_lm)
    for (name, ours), (_, theirs) in zip(
        loaded.state_dict().items(), reference.state_dict().items()
    ):
        assert torch.equal(ours, theirs), name


def test_an_lm_given_as_a_config_gets_random_weights(tiny_lm, tmp_path):
    config = json.loads((open(f"{tiny_lm}/config.json")).read())
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    lm = load_lm(str(path))
    assert lm.config.hidden_size == 64 and lm.config.vocab_size == 1000


def test_a_missing_lm_or_tower_is_one_line(tmp_path, tiny_vision):
    with pytest.raises(ConfigError, match="LM not found: /nowhere"):
        load_lm("/nowhere")
    with pytest.raises(ConfigError, match="unknown open_clip architecture 'ViT-Nope'"):
        load_vision("ViT-Nope", None)
    with pytest.raises(ConfigError, match="vision weights not found: /no/such.pt"):
        load_vision(tiny_vision.config, "/no/such.pt")
    other = tmp_path / "other.pt"
    torch.save({"visual.conv1.weight": torch.zeros(1)}, other)
    with pytest.raises(ConfigError, match="cannot load vision tower corpora-tiny-clip from"):
        load_vision(tiny_vision.config, str(other))


def test_the_tower_gives_penultimate_layer_patches_without_cls(tiny_lm, tiny_vision):
    model = build(tiny_lm, tiny_vision)
    visual = model.vision.visual
    captured = []
    hook = visual.transformer.resblocks[-2].register_forward_hook(
        lambda module, inputs, output: captured.append(output)
    )
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        visual(images)
        features = model.vision(images)
    hook.remove()
    penultimate = captured[0] if visual.transformer.batch_first else captured[0].transpose(0, 1)
    assert features.shape == (2, 16, 64)  # 4 x 4 patches of the 64-wide tiny ViT
    torch.testing.assert_close(features, penultimate[:, 1:])
    assert model.tokens_per_image == 16 and model.image_size == 32


def test_the_tower_never_trains(tiny_lm, tiny_vision):
    model = build(tiny_lm, tiny_vision, stage=1).train()
    assert not model.vision.training and not model.vision.visual.training
    assert not any(p.requires_grad for p in model.vision.parameters())
    assert model.lm.training and all(p.requires_grad for p in model.lm.parameters())
    stage0 = build(tiny_lm, tiny_vision, stage=0)
    trainable = {n for n, p in stage0.named_parameters() if p.requires_grad}
    assert trainable == {"projector.weight", "projector.bias"}


def test_the_mlp_projector_is_two_layers_with_gelu(tiny_lm, tiny_vision):
    model = build(tiny_lm, tiny_vision, projector="mlp2x_gelu")
    shapes = [tuple(p.shape) for p in model.projector.parameters()]
    assert shapes == [(64, 64), (64,), (64, 64), (64,)]
    assert isinstance(model.projector[1], torch.nn.GELU)


DOC_A = [IMAGE, 3, 4, 5, 6, 7]
DOC_B = [8, 9, 10, 11]
DOC_C = [IMAGE, 20, 21, 22, 23, 24, 25]


@pytest.mark.parametrize("implementation", ["sdpa", "eager"])
def test_changing_one_document_leaves_the_other_documents_logits_unchanged(
    tiny_lm, tiny_vision, implementation
):
    model = build(tiny_lm, tiny_vision, attn_implementation=implementation)
    first = batch([[DOC_A, DOC_B]])
    second = batch([[DOC_A, DOC_C]])
    third = batch([[DOC_C, DOC_B]])
    with torch.no_grad():
        a = 16 + 5  # document A's tokens
        torch.testing.assert_close(
            model.logits(first)[0, :a], model.logits(second)[0, :a], rtol=0, atol=1e-5
        )
        c = 16 + 6
        torch.testing.assert_close(
            model.logits(first)[0, a : a + 4],
            model.logits(third)[0, c : c + 4],
            rtol=0,
            atol=1e-5,
        )


def test_a_packed_document_reads_as_it_would_alone(tiny_lm, tiny_vision):
    model = build(tiny_lm, tiny_vision)
    packed = batch([[DOC_B, DOC_A]])
    alone = batch([[DOC_A]])
    alone["images"][0, 0] = packed["images"][0, 0]
    with torch.no_grad():
        torch.testing.assert_close(
            model.logits(packed)[0, 4 : 4 + 21], model.logits(alone)[0, :21], rtol=0, atol=1e-5
        )


def test_the_projected_patches_replace_the_image_slots(tiny_lm, tiny_vision):
    model = build(tiny_lm, tiny_vision)
    b = batch([[DOC_B, DOC_A]])
    with torch.no_grad():
        embeds = model.embed(b)
        expected = model.projector(model.vision(b["images"][0, :1]))[0]
    torch.testing.assert_close(embeds[0, 4:20], expected)
    table = model.lm.get_input_embeddings().weight
    torch.testing.assert_close(embeds[0, :4], table[torch.tensor(DOC_B)])


def test_the_loss_is_the_summed_cross_entropy_of_the_labels(tiny_lm, tiny_vision):
    model = build(tiny_lm, tiny_vision)
    b = batch([[DOC_A, DOC_B], [DOC_C]])
    with torch.no_grad():
        logits, loss = model.logits(b), model(b)
    keep = b["labels"] != -100
    expected = F.cross_entropy(logits[keep], b["labels"][keep], reduction="sum")
    torch.testing.assert_close(loss, expected)
    # every text token after the first of its document, images' included: 5 + 3 + 6
    assert int(model.count_targets(b)) == 14
    assert torch.isfinite(logits).all()


def test_static_and_dynamic_image_paths_agree(tiny_lm, tiny_vision):
    model = build(tiny_lm, tiny_vision)
    b = batch([[DOC_A, DOC_B], [DOC_C]], max_images=3)
    with torch.no_grad():
        dynamic = model.logits(b)
        model.static_shapes = True
        static = model.logits(b)
    torch.testing.assert_close(dynamic, static, rtol=0, atol=1e-5)


def test_the_lm_decoder_layers_are_the_fsdp_units(tiny_lm, tiny_vision):
    model = build(tiny_lm, tiny_vision)
    layers = model.shard_layers()
    assert [type(layer).__name__ for layer in layers] == ["LlamaDecoderLayer"] * 2


def test_a_second_lm_with_other_weights_gives_other_logits(tmp_path, tiny_lm, tiny_vision):
    other = save_tiny_lm(str(tmp_path / "other"), seed=1)
    b = batch([[DOC_A]])
    with torch.no_grad():
        ours = build(tiny_lm, tiny_vision).logits(b)
        theirs = build(other, tiny_vision).logits(b)
    assert not torch.allclose(ours, theirs)


@pytest.mark.parametrize("stage", [0, 1])
def test_activation_checkpointing_gives_the_same_loss_and_gradients(tiny_lm, tiny_vision, stage):
    b = batch([[DOC_A, DOC_B]])
    grads = []
    for checkpointing in (False, True):
        model = build(tiny_lm, tiny_vision, stage=stage, activation_checkpointing=checkpointing)
        assert model.lm.is_activation_checkpointing == checkpointing
        model.train()
        loss = model(b)
        loss.backward()
        grads.append((loss.detach(), model.projector.weight.grad.clone()))
    torch.testing.assert_close(grads[0][0], grads[1][0])
    torch.testing.assert_close(grads[0][1], grads[1][1])


def test_a_batch_of_text_only_documents_trains_the_projector_with_zero_gradient(
    tiny_lm, tiny_vision
):
    model = build(tiny_lm, tiny_vision).train()
    b = batch([[DOC_B, [30, 31, 32]]])  # two image slots, both empty
    assert b["images"].shape[1] == 2 and not b["image_mask"].any()
    loss = model(b)
    loss.backward()
    assert torch.isfinite(loss) and torch.equal(
        model.projector.weight.grad, torch.zeros_like(model.projector.weight)
    )
