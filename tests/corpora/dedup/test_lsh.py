from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corpora.dedup.lsh import (
    band_keys,
    bands,
    components,
    find,
    first_shared_band,
    merge,
    near_pairs,
    union,
)
from corpora.dedup.phash import hamming


@pytest.mark.parametrize("radius", [0, 3, 12, 20])
def test_bands_cover_every_bit_once(radius):
    covered = [shift + i for shift, width in bands(radius) for i in range(width)]
    assert sorted(covered) == list(range(64)) and len(bands(radius)) == radius + 1


@pytest.mark.parametrize("radius", [4, 12])
def test_buckets_find_exactly_the_pairs_within_the_radius_each_once(radius):
    rng = random.Random(radius)
    base = [rng.getrandbits(64) for _ in range(30)]
    hashes = []  # each base hash and a few neighbours at 0..radius+2 bits
    for value in base:
        hashes.append(value)
        for flips in (0, radius // 2, radius, radius + 1, radius + 2):
            bits = rng.sample(range(64), flips)
            hashes.append(value ^ sum(1 << b for b in bits))
    members = [(f"n{i:03d}", h) for i, h in enumerate(hashes)]
    buckets = {}
    for key, value in members:
        for band in band_keys(value, radius):
            buckets.setdefault(band, []).append((key, value))
    found = [p for (band, _), group in buckets.items() for p in near_pairs(group, radius, band)]
    expected = {
        (a, b)
        for (a, ha), (b, hb) in itertools.combinations(members, 2)
        if hamming(ha, hb) <= radius
    }
    assert sorted(found) == sorted(expected)  # every pair, and each once
    assert near_pairs(members, radius) == sorted(expected)


def test_first_shared_band_is_none_for_hashes_that_share_none():
    assert first_shared_band(0, (1 << 64) - 1, 5) is None


def test_components_name_each_cluster_by_its_smallest_member():
    assert components([3, 1, 2, 5, 4], [(4, 5), (2, 5), (1, 3)]) == {1: 1, 2: 2, 3: 1, 4: 2, 5: 2}


@given(
    st.lists(st.tuples(st.integers(0, 30), st.integers(0, 30)), max_size=60),
    st.lists(st.integers(0, 3), max_size=60),
    st.randoms(use_true_random=False),
)
def test_union_finds_made_apart_and_merged_in_any_order_name_each_cluster_by_its_smallest(
    pairs, parts, rng
):
    """The Beam combines' accumulators: pairs split among workers in any way,
    each worker's union-find merged in any order, name every connected
    cluster of the pairs by its smallest member (found here by a search)."""
    accumulators: list[dict] = [{} for _ in range(4)]
    for (a, b), part in zip(pairs, parts + [0] * len(pairs)):
        union(accumulators[part], a, b)
    rng.shuffle(accumulators)
    merged = merge(accumulators)
    linked: dict = {}
    for a, b in pairs:
        linked.setdefault(a, set()).add(b)
        linked.setdefault(b, set()).add(a)
    expected = {}
    for start in linked:
        seen, todo = {start}, [start]
        while todo:
            for other in linked[todo.pop()] - seen:
                seen.add(other)
                todo.append(other)
        expected[start] = min(seen)
    assert set(merged) == set(linked)  # every node of a pair, none other
    assert {node: find(merged, node) for node in linked} == expected
    assert components(linked, pairs) == expected
