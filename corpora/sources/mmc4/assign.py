"""Image-to-sentence assignment by linear assignment (MMC4's matching).

MMC4 places each image in its document by solving a bipartite matching on the
CLIP similarity matrix (images x sentences): every image goes to a different
sentence and the total similarity is maximal. The v1 release shipped
``matched_text_index``/``matched_sim`` values that disagree with that matching
in about 10% of documents; :func:`assign_images` recomputes them from
``similarity_matrix``.

A document can hold more images than sentences; a one-to-one matching then
leaves some images over. Those go to the sentence they are most similar to
(their argmax), after the matching has placed the others.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


def assign_images(
    similarity_matrix: Sequence[Sequence[float]] | np.ndarray,
) -> tuple[list[int], list[float]]:
    """``(matched_text_index, matched_sim)`` for every image (row).

    Rows are images, columns sentences. The images the matching can place
    (at most one per sentence) maximise the summed similarity; images beyond
    the number of sentences go to their argmax sentence (the first one on a
    tie). In the second example the matching places images 0 and 2
    (0.9 + 0.3 beats 0.9 + 0.2) and image 1, left over, joins sentence 0.

    >>> assign_images([[0.24, 0.31, 0.27],
    ...                [0.22, 0.32, 0.26]])
    ([2, 1], [0.27, 0.32])
    >>> assign_images([[0.9, 0.1],
    ...                [0.8, 0.2],
    ...                [0.7, 0.3]])
    ([0, 0, 1], [0.9, 0.8, 0.3])
    >>> assign_images([])
    ([], [])
    """
    from scipy.optimize import linear_sum_assignment

    matrix = np.asarray(similarity_matrix, dtype=np.float64)
    if matrix.size == 0 and (matrix.ndim == 1 or matrix.shape[0] == 0):
        return [], []
    if matrix.ndim != 2:
        raise ValueError(
            f"similarity_matrix must be 2-D (images x sentences), got shape {matrix.shape}"
        )
    images, sentences = matrix.shape
    if sentences == 0:
        raise ValueError(f"{images} image(s) but no sentences to assign them to")
    if not np.all(np.isfinite(matrix)):
        raise ValueError("similarity_matrix holds a NaN or infinite value")
    rows, columns = linear_sum_assignment(matrix, maximize=True)
    matched = np.argmax(matrix, axis=1)  # for the images the matching leaves over
    matched[rows] = columns
    indices = [int(i) for i in matched]
    sims = [float(matrix[image, sentence]) for image, sentence in enumerate(indices)]
    return indices, sims
