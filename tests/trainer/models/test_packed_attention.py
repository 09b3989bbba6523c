"""Attention over packed documents without an L x L tensor, against the dense-mask reference.

Both models, on packed rows of several documents and images: ``varlen`` gives the dense
path's logits and gradients (fp32, within 1e-5); ``flex`` its logits (PyTorch has no
FlexAttention backward on the CPU). At L = 2048 no allocation of ``L × L`` elements happens
on the varlen path, and does on the dense one (so the check can fail).
"""

import json
import warnings

import pytest
import torch

from tests.trainer.contract import IMAGE, prefixlm_batch, vila_batch
from trainer.config import prefixlm_config, vila_config
from trainer.models.attention import document_attention, segment_runs
from trainer.models.prefixlm import PrefixLM
from trainer.models.vila import build_vila
from trainer.runtime import cpu_allocations

IMAGE_ID = 1000
DOC_A = [IMAGE, 3, 4, 5, 6, 7]
DOC_B = [8, 9, 10, 11]
DOC_C = [IMAGE, 20, 21, 22, 23, IMAGE, 24, 25]
ROWS = [[DOC_A, DOC_B, DOC_C], [DOC_B, DOC_C, [30, 31], DOC_A]]


def vila(tiny_lm, tiny_vision, attention, path=None):
    torch.manual_seed(0)
    config = vila_config(
        path or tiny_lm,
        tiny_vision.config,
        tiny_vision.checkpoint,
        stage=1,
        attn_implementation=attention,
    )
    return build_vila(config, image_token_id=IMAGE_ID)


def prefixlm(attention, seq_len=96, vocab=40):
    torch.manual_seed(0)
    config = prefixlm_config("tiny", attention=attention)
    return PrefixLM(config, vocab_size=vocab, seq_len=seq_len, image_token_id=IMAGE_ID)


def logits_and_gradients(model, batch, backward=True):
    model.train()
    logits = model.logits(batch)
    if not backward:
        return logits.detach(), {}
    model(batch).backward()
    grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    return logits.detach(), grads


def assert_same(ours, reference, where):
    (logits, grads), (ref_logits, ref_grads) = ours, reference
    torch.testing.assert_close(logits, ref_logits, rtol=0, atol=1e-5, msg=where)
    assert grads.keys() == ref_grads.keys() or not grads
    for name, grad in grads.items():
        torch.testing.assert_close(grad, ref_grads[name], rtol=0, atol=1e-5, msg=name)


def quiet_flex(fn):
    with warnings.catch_warnings():  # uncompiled flex on the CPU warns that it is unfused
        warnings.simplefilter("ignore")
        return fn()


def test_vila_varlen_gives_the_dense_logits_and_gradients(tiny_lm, tiny_vision):
    batch = vila_batch(ROWS, seq_len=96, tokens_per_image=16, image_token_id=IMAGE_ID, max_images=4)
    assert batch["image_mask"].sum() == 6 and (batch["segment_ids"] == 0).any()
    reference = logits_and_gradients(vila(tiny_lm, tiny_vision, "sdpa"), batch)
    assert len(reference[1]) > 10  # the LM's weights and the projector's
    for attention in ("varlen", "eager"):
        ours = logits_and_gradients(vila(tiny_lm, tiny_vision, attention), batch)
        assert_same(ours, reference, attention)


@pytest.mark.slow  # transformers compiles its FlexAttention call
def test_vila_flex_gives_the_dense_logits(tiny_lm, tiny_vision):
    # 256 positions: two FlexAttention tiles, documents across their edge
    rows = [[DOC_A, DOC_B, DOC_C] * 4, [DOC_C] * 6 + [DOC_B]]
    batch = vila_batch(
        rows, seq_len=256, tokens_per_image=16, image_token_id=IMAGE_ID, max_images=12
    )
    with torch.no_grad():
        reference = vila(tiny_lm, tiny_vision, "sdpa").logits(batch)
        model = vila(tiny_lm, tiny_vision, "flex")
        assert model.lm.config._attn_implementation == "flex_attention"
        flex = quiet_flex(lambda: model.logits(batch))
    torch.testing.assert_close(flex, reference, rtol=0, atol=1e-5)


PREFIX_ROWS = [[DOC_A, DOC_B, DOC_C], [DOC_B, [30, 31, 32], DOC_A]]
PREFIXES = [[2, 1, 0], [2, 1, 3]]  # text tokens after the images in each prefix


def test_prefixlm_varlen_gives_the_dense_logits_and_gradients():
    batch = prefixlm_batch(
        PREFIX_ROWS, PREFIXES, seq_len=96, tokens_per_image=16, image_token_id=IMAGE_ID,
        max_images=3,
    )  # fmt: skip
    reference = logits_and_gradients(prefixlm("dense"), batch)
    assert len(reference[1]) > 20
    assert_same(logits_and_gradients(prefixlm("varlen"), batch), reference, "varlen")


def test_prefixlm_flex_gives_the_dense_logits():
    rows = [[DOC_A, DOC_B, DOC_C] * 3, [DOC_C, DOC_B, DOC_A] * 3]
    batch = prefixlm_batch(
        rows, [[2, 1, 0] * 3, [0, 1, 2] * 3], seq_len=200, tokens_per_image=16,
        image_token_id=IMAGE_ID, max_images=9,
    )  # fmt: skip
    with torch.no_grad():
        reference = prefixlm("dense", seq_len=200).eval().logits(batch)
        flex = quiet_flex(lambda: prefixlm("flex", seq_len=200).eval().logits(batch))
    torch.testing.assert_close(flex, reference, rtol=0, atol=1e-5)


def test_a_decoder_document_without_prefix_and_padding_get_zeros_as_the_dense_path():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 6, 4) for _ in range(3))
    decoder = torch.tensor([[1, 1, 2, 2, 0, 0], [3, 3, 3, 3, 3, 3]])
    encoder = torch.tensor([[2, 2, 2, 0, 0, 0], [1, 1, 2, 2, 3, 0]])  # document 1 has none
    outs = {
        kind: quiet_flex(lambda: document_attention(kind, decoder, encoder, causal=False)(q, k, v))
        for kind in ("varlen", "flex", "dense")
    }
    assert torch.equal(outs["dense"][0, :, :2], torch.zeros(2, 2, 4))
    assert torch.equal(outs["dense"][0, :, 4:], torch.zeros(2, 2, 4))
    for kind in ("varlen", "flex"):
        torch.testing.assert_close(outs[kind], outs["dense"], rtol=0, atol=1e-6, msg=kind)


def test_segment_runs_keep_padding_and_order():
    runs = segment_runs(torch.tensor([[1, 1, 2, 0, 0], [0, 0, 0, 0, 0], [1, 2, 3, 3, 3]]))
    assert runs == [
        [(1, 0, 2), (2, 2, 3), (0, 3, 5)],
        [(0, 0, 5)],
        [(1, 0, 1), (2, 1, 2), (3, 2, 5)],
    ]


LONG = 2048


def largest_allocation(step) -> int:
    return cpu_allocations(step).largest


def long_vila(tmp_path, tiny_lm, tiny_vision, attention):
    # a vocabulary of 256 keeps the logits (L x 256 floats) under L x L bytes
    config = json.loads(open(f"{tiny_lm}/config.json").read())
    config.update(vocab_size=256, max_position_embeddings=LONG)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return vila(tiny_lm, tiny_vision, attention, path=str(path)).train()


@pytest.mark.slow
def test_no_l_by_l_tensor_is_allocated_at_2048(tmp_path, tiny_lm, tiny_vision):
    documents = [[IMAGE] + list(range(3, 200)), list(range(3, 255)) * 3, [IMAGE] + [9] * 900]
    vila_rows = vila_batch([documents], seq_len=LONG, tokens_per_image=16, image_token_id=IMAGE_ID)
    prefix_rows = prefixlm_batch(
        [documents], [[100, 300, 0]], seq_len=LONG, tokens_per_image=16,
        image_token_id=IMAGE_ID, max_images=2,
    )  # fmt: skip
    limit = LONG * LONG  # bytes: an L x L tensor of any dtype is at least this large
    for model, batch in (
        (long_vila(tmp_path, tiny_lm, tiny_vision, "varlen"), vila_rows),
        (prefixlm("varlen", seq_len=LONG, vocab=256).train(), prefix_rows),
    ):
        assert largest_allocation(lambda: model(batch).backward()) < limit, model.objective
    for model, batch in (
        (long_vila(tmp_path, tiny_lm, tiny_vision, "sdpa"), vila_rows),
        (prefixlm("dense", seq_len=LONG, vocab=256).train(), prefix_rows),
    ):
        assert largest_allocation(lambda: model(batch).backward()) >= limit, model.objective
