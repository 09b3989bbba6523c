"""Global top-fraction selection: exact, ties by id, independent of how records are split."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corpora.record import Document, Drop
from corpora.stages import selection


def brute_force(items, fraction):
    ordered = sorted(items, key=lambda item: (-item[0], item[1]))
    return [record_id for _, record_id in ordered[: selection.target_count(len(items), fraction)]]


def test_docstring_example_keeps_exactly_a_b_c():
    items = [(0.9, "a"), (0.7, "b"), (0.7, "c"), (0.7, "d"), (0.2, "e"), (0.1, "f")]
    assert selection.select_top_fraction(items, 0.5) == ["a", "b", "c"]
    boundary = selection.locate_boundary(selection.histogram(s for s, _ in items), 0.5)
    assert (boundary.keep, boundary.above, boundary.need, boundary.bucket_size) == (3, 1, 2, 3)


def test_ties_are_broken_by_id_not_by_input_order():
    items = [(0.5, f"id{i:02d}") for i in range(10)]
    random.Random(3).shuffle(items)
    assert selection.select_top_fraction(items, 0.3) == ["id00", "id01", "id02"]


@pytest.mark.parametrize("fraction, expected", [(1.0, 6), (0.01, 0), (0.5, 3), (0.34, 2)])
def test_keeps_exactly_the_rounded_count(fraction, expected):
    items = [(s / 10, str(s)) for s in range(6)]
    assert len(selection.select_top_fraction(items, fraction)) == expected


@settings(max_examples=200, deadline=None)
@given(
    scores=st.lists(
        st.sampled_from([-0.3, 0.1, 0.1000001, 0.25, 0.2500004, 0.3, 0.31, 0.9]), max_size=60
    ),
    fraction=st.floats(0.0, 1.0),
    resolution=st.sampled_from([1e-4, 0.05, 10.0]),
)
def test_matches_a_full_sort_for_any_scores_fraction_and_bucket_width(scores, fraction, resolution):
    items = [(score, f"r{i:03d}") for i, score in enumerate(scores)]
    expected = brute_force(items, fraction)
    assert selection.select_top_fraction(items, fraction, resolution) == expected


@settings(max_examples=100, deadline=None)
@given(
    scores=st.lists(st.floats(-1, 1), min_size=1, max_size=80),
    parts=st.integers(1, 7),
    seed=st.integers(0, 99),
)
def test_histogram_does_not_depend_on_how_records_are_split(scores, parts, seed):
    shuffled = scores[:]
    random.Random(seed).shuffle(shuffled)
    pieces = [selection.histogram(shuffled[i::parts]) for i in range(parts)]
    assert selection.merge_histograms(pieces) == selection.histogram(scores)


@settings(max_examples=100, deadline=None)
@given(scores=st.lists(st.floats(-1, 1), min_size=1, max_size=200), p=st.floats(0.01, 1.0))
def test_quantiles_are_within_one_bucket_of_the_exact_quantile(scores, p):
    resolution = 0.01
    counts = selection.histogram(scores, resolution)
    estimate = selection.quantiles(counts, [p], resolution)[f"{p:g}"]
    exact = sorted(scores)[max(1, math.ceil(p * len(scores))) - 1]
    assert abs(estimate - exact) <= resolution


def test_cut_rejects_a_boundary_that_changed_between_passes():
    boundary = selection.locate_boundary({5: 2}, 0.5)
    with pytest.raises(RuntimeError, match="scores changed"):
        selection.cut_in_boundary(boundary, [(0.0005, "a")])


def test_threshold_keeps_at_least_minimum_and_names_what_it_drops():
    doc = Document(id="x", corpus="c", chunks=())
    assert selection.threshold(doc, 0.3, 0.3, "too_low") is doc
    dropped = selection.threshold(doc, 0.29, 0.3, "too_low")
    assert isinstance(dropped, Drop) and dropped.reason == "too_low"
    assert selection.threshold(doc, float("nan"), 0.3, "too_low").reason == "too_low_missing_score"
    assert selection.threshold(doc, None, 0.3, "too_low").reason == "too_low_missing_score"
