"""Document masks built on the device, and attention rows that have no key."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from trainer.models.attention import attend, document_causal_mask, document_mask


def test_the_causal_document_mask_of_two_documents_and_padding():
    mask = document_causal_mask(torch.tensor([[1, 1, 1, 2, 2, 0]]))[0]
    expected = torch.tensor(
        [
            [1, 0, 0, 0, 0, 0],
            [1, 1, 0, 0, 0, 0],
            [1, 1, 1, 0, 0, 0],
            [0, 0, 0, 1, 0, 0],
            [0, 0, 0, 1, 1, 0],
            [0, 0, 0, 0, 0, 0],
        ],
        dtype=torch.bool,
    )
    assert torch.equal(mask, expected)


def test_cross_attention_sees_only_the_prefix_of_its_own_document():
    decoder = torch.tensor([[1, 1, 2, 0]])
    encoder = torch.tensor([[1, 2, 2, 0, 0]])
    expected = torch.tensor(
        [[1, 0, 0, 0, 0], [1, 0, 0, 0, 0], [0, 1, 1, 0, 0], [0, 0, 0, 0, 0]], dtype=torch.bool
    )
    assert torch.equal(document_mask(decoder, encoder)[0], expected)


segments = st.lists(st.integers(0, 3), min_size=1, max_size=12).map(
    lambda ids: torch.tensor([sorted(ids, key=lambda s: (s == 0, s))])
)


@settings(max_examples=50, deadline=None)
@given(segments)
def test_the_masks_never_join_two_documents_or_padding(segment_ids):
    mask = document_causal_mask(segment_ids)[0]
    q, k = torch.nonzero(mask, as_tuple=True)
    ids = segment_ids[0]
    assert torch.all(ids[q] == ids[k]) and torch.all(ids[q] > 0) and torch.all(k <= q)
    # and it allows everything else inside a document
    for i in range(ids.numel()):
        for j in range(i + 1):
            if ids[i] > 0 and ids[i] == ids[j]:
                assert mask[i, j]


def test_a_row_without_keys_gives_zeros_and_no_nan():
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 3, 4, requires_grad=True) for _ in range(3))
    mask = torch.tensor([[[True, False], [False, False], [True, True]]])
    out = attend(q, k[:, :, :2], v[:, :, :2], mask)
    assert torch.equal(out[0, :, 1], torch.zeros(2, 4))
    out.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))
    # the others are plain softmax attention over their allowed keys
    torch.testing.assert_close(out[0, :, 0], v[0, :, 0])  # one key: all its weight
    weights = torch.softmax(q[0, :, 2:3] @ k[0, :, :2].transpose(1, 2) / 2.0, dim=-1)
    torch.testing.assert_close(out[0, :, 2], (weights @ v[0, :, :2])[:, 0])


@settings(max_examples=50, deadline=None)
@given(segments, segments)
def test_the_device_masks_are_the_data_sides_masks(q_segment_ids, k_segment_ids):
    features = pytest.importorskip("trainer.features")  # the data side (trainer-data)
    assert torch.equal(
        document_causal_mask(q_segment_ids),
        torch.from_numpy(features.document_causal_mask(q_segment_ids.numpy())),
    )
    assert torch.equal(
        document_mask(q_segment_ids, k_segment_ids),
        torch.from_numpy(features.document_mask(q_segment_ids.numpy(), k_segment_ids.numpy())),
    )
