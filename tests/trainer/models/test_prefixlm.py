"""PrefixLM: the stem's patch count, attention confined to documents, the loss."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tests.trainer.contract import IMAGE, prefixlm_batch
from trainer.batch import stack_images
from trainer.config import ConfigError, prefixlm_config
from trainer.features import pack_prefixlm
from trainer.models.prefixlm import ConvStem, PrefixLM

VOCAB, SEQ_LEN, IMAGE_ID = 40, 64, 40


def tiny(seed: int = 0, **changes) -> PrefixLM:
    torch.manual_seed(seed)
    model = PrefixLM(
        prefixlm_config("tiny", **changes),
        vocab_size=VOCAB,
        seq_len=SEQ_LEN,
        image_token_id=IMAGE_ID,
    )
    return model.eval()


def batch(rows, prefixes, **options):
    return prefixlm_batch(
        rows,
        prefixes,
        seq_len=SEQ_LEN,
        tokens_per_image=16,
        image_token_id=IMAGE_ID,
        **options,
    )


@pytest.mark.parametrize(
    "size, changes",
    [("tiny", {}), ("tiny", {"stem_stages": 2, "patch_size": 2}), ("base", {})],
)
def test_the_stem_makes_tokens_per_image_patches(size, changes):
    config = prefixlm_config(size, **changes)
    stem = ConvStem(config).eval()
    with torch.no_grad():
        out = stem(torch.zeros(1, 3, config.image_size, config.image_size))
    assert out.shape == (1, config.tokens_per_image, config.width)


def test_sizes_follow_simvlm():
    base, large = prefixlm_config("base"), prefixlm_config("large")
    assert (base.encoder_layers, base.decoder_layers, base.width) == (12, 12, 768)
    assert (large.encoder_layers, large.decoder_layers, large.width) == (24, 24, 1024)
    assert (base.stem, base.stem_stages, base.image_size, base.tokens_per_image) == (
        "resnet50",
        3,
        224,
        196,
    )


def test_an_image_size_the_stem_cannot_divide_is_refused():
    with pytest.raises(ConfigError, match="image size 70 is not a multiple"):
        prefixlm_config("tiny", image_size=70)
    with pytest.raises(ConfigError, match="unknown PrefixLM size"):
        prefixlm_config("huge")


def test_input_and_output_embeddings_are_tied():
    model = tiny()
    shaped = [n for n, p in model.named_parameters() if p.shape == (VOCAB, model.config.width)]
    assert shaped == ["token_embedding.weight"]
    b = batch([[[1, 2, 3, 4]]], [[2]])  # piece 7 is nowhere in the input
    with torch.no_grad():
        before = model.logits(b)
        model.token_embedding.weight[7] += 1.0
        after = model.logits(b)
    assert not torch.allclose(after[..., 7], before[..., 7])  # its output logit moved
    torch.testing.assert_close(after[..., :7], before[..., :7], rtol=0, atol=0)


DOC_A = [IMAGE, 3, 4, 5, 6, 7, 8]
DOC_B = [9, 10, 11, 12, 13]
DOC_C = [IMAGE, 20, 21, 22, 23, 24, 25, 26]


def test_changing_one_document_leaves_the_other_documents_logits_unchanged():
    model = tiny()
    first = batch([[DOC_A, DOC_B]], [[2, 2]])
    second = batch([[DOC_A, DOC_C]], [[2, 4]])
    # document A: 2 + 16 encoder tokens, 4 decoder tokens, first in both rows
    assert torch.equal(first["images"][0, 0], second["images"][0, 0])
    with torch.no_grad():
        a_first, a_second = model.logits(first)[0, :4], model.logits(second)[0, :4]
    torch.testing.assert_close(a_first, a_second, rtol=0, atol=1e-5)
    # and the other way round: B after A, and B after C
    third = batch([[DOC_C, DOC_B]], [[4, 2]])
    with torch.no_grad():
        b_first = model.logits(first)[0, 4:7]
        b_third = model.logits(third)[0, 3:6]  # C leaves 3 decoder tokens before B
    torch.testing.assert_close(b_first, b_third, rtol=0, atol=1e-5)


def test_a_packed_document_reads_as_it_would_alone():
    """Positions restart per document and nothing crosses over, so a document packed second
    gives the logits it gives at the start of a row of its own."""
    model = tiny()
    packed = batch([[DOC_B, DOC_A]], [[2, 2]])
    alone = batch([[DOC_A]], [[2]])
    alone["images"][0, 0] = packed["images"][0, 0]
    with torch.no_grad():
        torch.testing.assert_close(
            model.logits(packed)[0, 3:7], model.logits(alone)[0, :4], rtol=0, atol=1e-5
        )


def test_every_image_slot_encoding_gives_the_same_logits():
    """XLA encodes every slot (static shapes), elsewhere only the real images."""
    model = tiny()
    b = batch([[DOC_A, DOC_B], [DOC_B]], [[2, 2], [3]], max_images=3)
    with torch.no_grad():
        dynamic = model.logits(b)
        model.static_shapes = True
        static = model.logits(b)
    torch.testing.assert_close(dynamic, static, rtol=0, atol=1e-5)


def test_the_loss_is_the_summed_cross_entropy_of_the_decoder_targets():
    model = tiny()
    b = batch([[DOC_A, DOC_B], [DOC_C]], [[2, 2], [3]])
    with torch.no_grad():
        logits = model.logits(b)
        loss = model(b)
    weights = b["decoder_loss_weights"].bool()
    expected = F.cross_entropy(logits[weights], b["decoder_target_ids"][weights], reduction="sum")
    torch.testing.assert_close(loss, expected)
    assert model.count_targets(b) == 4 + 3 + 4  # text tokens after each prefix
    assert torch.isfinite(model.logits(b)).all()  # padding rows attend to nothing, no NaN


def test_gradients_reach_the_stem_through_the_image_slots():
    model = tiny().train()
    model(batch([[DOC_A]], [[2]])).backward()
    assert model.stem.body[0].weight.grad.abs().sum() > 0
    assert model.token_embedding.weight.grad.abs().sum() > 0


def packed_batch(rows, encoder_len, decoder_len):
    """``rows``: per row, ``(prefix ids, target ids, images)`` of each document."""
    arrays = pack_prefixlm(
        [[(prefix, target) for prefix, target, _ in row] for row in rows],
        encoder_len,
        decoder_len,
        pad_id=0,
    )
    images, mask = stack_images(
        [[image for _, _, images in row for image in images] for row in rows],
        max_images=max(1, encoder_len // 16),
        image_size=(64, 64),
    )
    return {
        name: torch.from_numpy(a)
        for name, a in {**arrays, "images": images, "image_mask": mask}.items()
    }


@pytest.mark.parametrize("attention", ["varlen", "dense"])
def test_a_packed_batch_gives_each_documents_logits_and_loss_as_it_alone_would(attention):
    """Encoder and decoder rows at their own lengths, documents of several samples in a row:
    each document's logits and loss are those it gives in a batch of its own, in fp32."""
    model = tiny(attention=attention)
    rng = np.random.default_rng(0)

    def document(images, prefix_text, target):
        pixels = [rng.integers(0, 256, (64, 64, 3), dtype=np.uint8) for _ in range(images)]
        prefix = [1] + [IMAGE_ID] * 16 * images + rng.integers(3, VOCAB, prefix_text).tolist()
        return np.array(prefix), rng.integers(3, VOCAB, target), pixels

    docs = [document(1, 2, 5), document(0, 7, 3), document(2, 0, 4), document(0, 1, 9)]
    docs += [document(1, 5, 6), document(0, 3, 2)]
    rows = [docs[:2], docs[2:3], docs[3:]]  # 20 + 8, 33, 2 + 23 + 4 encoder tokens
    packed = packed_batch(rows, encoder_len=40, decoder_len=20)
    assert packed["encoder_input_ids"].shape == (3, 40) and packed["decoder_target_ids"].shape == (
        3,
        20,
    )
    with torch.no_grad():
        logits = model.logits(packed)
        losses = []
        for row_index, row in enumerate(rows):
            start = 0
            for doc in row:
                prefix, target, _ = doc
                alone = packed_batch([[doc]], len(prefix), len(target))
                own = model.logits(alone)[0]
                torch.testing.assert_close(
                    logits[row_index, start : start + len(target)], own, rtol=0, atol=1e-5
                )
                losses.append(model(alone))
                start += len(target)
        torch.testing.assert_close(model(packed), torch.stack(losses).sum(), rtol=0, atol=1e-5)
    assert int(packed["decoder_loss_weights"].sum()) == sum(len(t) for _, t, _ in docs)
