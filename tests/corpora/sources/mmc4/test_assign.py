import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment

from corpora.sources.mmc4.assign import assign_images
from tests import fixtures


def test_real_mmc4_document_keeps_its_upstream_assignment():
    doc = fixtures.mmc4_example()
    indices, sims = assign_images(doc["similarity_matrix"])
    assert indices == [info["matched_text_index"] for info in doc["image_info"]] == [2, 1]
    assert sims == pytest.approx([info["matched_sim"] for info in doc["image_info"]])


def test_assignment_maximises_total_similarity_not_each_image_greedily():
    # Greedy argmax would put both images on sentence 1; the matching cannot.
    indices, sims = assign_images([[0.20, 0.30, 0.10], [0.27, 0.28, 0.12]])
    assert indices == [1, 0]
    assert sims == [0.30, 0.27]


def test_images_beyond_the_number_of_sentences_go_to_their_argmax():
    indices, sims = assign_images([[0.9, 0.1], [0.8, 0.2], [0.7, 0.3], [0.1, 0.6]])
    # the matching places image 0 (0.9) and image 3 (0.6); images 1 and 2 join sentence 0
    assert indices == [0, 0, 0, 1]
    assert sims == [0.9, 0.8, 0.7, 0.6]


def test_matches_scipy_total_on_random_square_matrices():
    rng = np.random.default_rng(0)
    for _ in range(20):
        matrix = rng.random((5, 7))
        indices, sims = assign_images(matrix)
        assert len(set(indices)) == 5
        rows, cols = linear_sum_assignment(matrix, maximize=True)
        assert sum(sims) == pytest.approx(matrix[rows, cols].sum())


def test_empty_and_invalid_matrices():
    assert assign_images([]) == ([], [])
    assert assign_images(np.zeros((0, 3))) == ([], [])
    with pytest.raises(ValueError, match="no sentences"):
        assign_images([[], []])
    with pytest.raises(ValueError, match="NaN"):
        assign_images([[0.1, float("nan")]])
