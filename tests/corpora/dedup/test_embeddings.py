"""corpora.dedup.embeddings: random-hyperplane buckets, exact pairs within a
bucket, and a decision that depends on nothing but the embeddings."""

from __future__ import annotations

import hashlib
import itertools

import numpy as np
import pytest

from corpora.config.flags import FlagError, settings_from_flags
from corpora.dedup import embeddings as rule
from corpora.record import Document, ImageChunk, TextChunk


def _cloud(seed: int = 3, dim: int = 64, groups: int = 30, copies: int = 3, noise: float = 0.08):
    """``groups`` random directions, each with ``copies`` noisy copies: (key, unit vector)."""
    rng = np.random.default_rng(seed)
    members = []
    for group in range(groups):
        centre = rng.standard_normal(dim)
        for copy in range(copies):
            vector = centre + noise * np.linalg.norm(centre) / np.sqrt(dim) * rng.standard_normal(
                dim
            )
            members.append(((f"g{group:02d}", copy), rule.unit(vector)))
    return members


def _brute_force(members, threshold):
    return sorted(
        (a[0], b[0])
        for a, b in itertools.combinations(sorted(members, key=lambda m: m[0]), 2)
        if float(a[1] @ b[1]) >= np.float32(threshold)
    )


def _lsh(members, threshold):
    return sorted(
        {
            pair
            for band, bucket in rule.buckets(members).items()
            for pair in rule.near_pairs(bucket, threshold, band[0])
        }
    )


def test_the_hyperplanes_are_the_same_bytes_everywhere():
    # derived from the seed through blake2b: no random generator's version matters
    planes = rule.hyperplanes(32)
    assert planes.shape == (rule.BANDS * rule.ROWS, 32)
    digest = hashlib.sha256(np.round(planes, 9).tobytes()).hexdigest()
    assert digest == hashlib.sha256(np.round(rule.hyperplanes(32), 9).tobytes()).hexdigest()
    assert abs(float(planes.mean())) < 0.05 and abs(float(planes.std()) - 1.0) < 0.05
    assert (
        rule.band_keys(rule.unit(np.arange(32.0)))[:3]
        == rule.band_keys(rule.unit(np.arange(32.0) * 7.0))[:3]
    )


def test_buckets_find_every_pair_of_the_planted_copies_and_nothing_below_the_threshold():
    members = _cloud()
    threshold = 0.95
    expected = _brute_force(members, threshold)
    found = _lsh(members, threshold)
    assert set(found) <= set(expected)  # exact within buckets: no pair below the threshold
    assert len(expected) >= 80 and len(found) >= 0.97 * len(expected)
    assert all(a[0][0] == b[0][0] for a, b in found)  # only copies of one direction


def test_each_pair_is_reported_from_one_bucket_only():
    members = _cloud(groups=5)
    reported = [
        pair
        for band, bucket in rule.buckets(members).items()
        for pair in rule.near_pairs(bucket, 0.9, band[0])
    ]
    assert len(reported) == len(set(reported))


def test_the_decision_does_not_depend_on_the_order_members_arrive():
    members = _cloud(groups=10)
    shuffled = list(reversed(members))
    assert _lsh(members, 0.95) == _lsh(shuffled, 0.95)


@pytest.mark.parametrize(
    "cosine, low, high", [(0.99, 0.9999, 1.0), (0.95, 0.999, 1.0), (0.0, 0, 0.03)]
)
def test_found_probability(cosine, low, high):
    assert low <= rule.found_probability(cosine) <= high


def test_embeddings_ride_in_the_image_meta_and_leave_it_whole():
    doc = Document("d", "mmc4", (ImageChunk("u0"), TextChunk("t"), ImageChunk("u1")))
    kept = rule.with_embeddings(doc, {1: [0.0, 3.0, 4.0]})
    assert [node for node, _ in rule.image_embeddings(kept)] == [("d", 1)]
    assert rule.without_embeddings(kept) == doc


def test_the_flag_needs_clip_and_a_cosine_in_0_1(tmp_path):
    flags = {"inputs": (str(tmp_path / "x.parquet"),), "output": str(tmp_path / "out")}
    with pytest.raises(FlagError, match="--near-dup-clip-sim needs --clip-model"):
        settings_from_flags("coyo", **flags, near_dup_clip_sim=0.95)
    with pytest.raises(FlagError, match=r"cosine similarity in \(0, 1\]"):
        settings_from_flags("coyo", **flags, near_dup_clip_sim=1.5)
    assert rule.clip_sim(settings_from_flags("coyo", **flags)) is None
