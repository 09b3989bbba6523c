import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corpora.stats.distributions import distribution, histogram_edges


def test_distribution_docstring_example_exactly():
    assert distribution({1: 2, 3: 1, 10: 1}) == {
        "count": 4,
        "sum": 15,
        "mean": 3.75,
        "min": 1,
        "max": 10,
        "median": 2.0,
        "p5": 1,
        "p95": 10,
        "histogram": {
            "edges": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11],
            "counts": [2, 0, 1, 0, 0, 0, 0, 0, 0, 1],
        },
    }
    assert distribution({}) is None


def test_histogram_edges_cover_the_range_in_equal_integer_bins():
    assert histogram_edges(5, 5) == [5, 6]
    assert histogram_edges(1, 40) == list(range(1, 42))
    edges = histogram_edges(0, 40)  # 41 values: no longer one bin per value
    assert edges == list(range(0, 43, 3)) and len(edges) - 1 <= 20


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=5000), min_size=1, max_size=300))
def test_distribution_agrees_with_numpy(values):
    dist = distribution(dict(zip(*np.unique(values, return_counts=True))))
    array = np.array(values)
    assert dist["count"] == len(values) and dist["sum"] == array.sum()
    assert dist["mean"] == pytest.approx(array.mean(), rel=1e-12)
    assert dist["median"] == np.median(array)
    assert dist["p5"] == np.percentile(array, 5, method="inverted_cdf")
    assert dist["p95"] == np.percentile(array, 95, method="inverted_cdf")
    counts, _ = np.histogram(array, bins=dist["histogram"]["edges"])
    assert dist["histogram"]["counts"] == counts.tolist()
    assert (
        dist["histogram"]["edges"][0] == array.min()
        and dist["histogram"]["edges"][-1] > array.max()
    )
