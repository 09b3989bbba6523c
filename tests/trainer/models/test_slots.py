"""Image features into the image slots of packed rows."""

import torch

from tests.trainer.contract import IMAGE, vila_batch
from trainer.models.slots import check_slots, image_features, place_images


def test_images_fill_their_slot_runs_in_order_across_documents():
    ids = torch.tensor([[5, 9, 9, 6, 0], [9, 9, 9, 9, 7]])
    features = torch.arange(1, 9, dtype=torch.float32).view(2, 2, 2, 1)  # [B, M, T, D]
    out = place_images(torch.zeros(2, 5, 1), ids, 9, features)[..., 0]
    assert out.tolist() == [[0, 1, 2, 0, 0], [5, 6, 7, 8, 0]]


def test_only_real_images_are_encoded_unless_shapes_must_stay_static():
    seen = []

    def encode(images):
        seen.append(images.shape[0])
        return images.mean(dim=(2, 3))[:, None, :].expand(-1, 2, -1)

    images = torch.randn(2, 3, 3, 4, 4)
    mask = torch.tensor([[True, True, False], [True, False, False]])
    dynamic = image_features(encode, images, mask, 2, 3, static_shapes=False)
    static = image_features(encode, images, mask, 2, 3, static_shapes=True)
    assert seen == [3, 6]
    assert torch.equal(dynamic[mask], static[mask])
    assert torch.equal(dynamic[~mask], torch.zeros(3, 2, 3))


def test_the_first_batch_check_names_a_row_whose_slots_do_not_fit_its_images():
    batch = vila_batch(
        [[[IMAGE, 3, 4]], [[5, 6]]], seq_len=16, tokens_per_image=4, image_token_id=99
    )
    assert check_slots(batch, 99, 4, "input_ids") is None
    assert check_slots(batch, 99, 8, "input_ids") == (
        "row 0 of the first batch has 4 image-slot tokens for 1 images of 8 tokens"
    )
    batch["image_mask"] = torch.tensor([[False, True], [False, False]])
    assert "empty slot before a real image" in check_slots(batch, 99, 4, "input_ids")


def test_a_batch_without_images_still_puts_the_encoder_in_the_graph():
    """DDP expects a gradient for every trainable weight, and encoders fail on no images."""
    encoder = torch.nn.Linear(3, 3)
    seen = []

    def encode(images):
        seen.append(images.shape[0])
        return encoder(images.mean(dim=(2, 3)))[:, None, :].expand(-1, 2, -1)

    images = torch.randn(2, 2, 3, 4, 4)
    mask = torch.zeros(2, 2, dtype=torch.bool)
    features = image_features(encode, images, mask, 2, 3, static_shapes=False)
    assert seen == [1] and torch.equal(features, torch.zeros(2, 2, 2, 3))
    features.sum().backward()
    assert torch.equal(encoder.weight.grad, torch.zeros(3, 3))
