from __future__ import annotations

import itertools

from corpora.dedup.phash import DEFAULT_DISTANCE, hamming, phash_of_image
from tests.dedup_photos import NEAR, planted


def test_the_default_radius_finds_95_percent_of_planted_near_duplicates_and_merges_no_photos():
    photos = planted()
    hashes = {key: phash_of_image(data) for key, data in photos.items()}
    originals = sorted(photo for photo, variant in photos if variant == "original")
    near = [hamming(hashes[p, "original"], hashes[p, v]) for p in originals for v in NEAR]
    caught = sum(d <= DEFAULT_DISTANCE for d in near)
    assert caught / len(near) >= 0.95, sorted(near)
    unrelated = [
        hamming(hashes[a, "original"], hashes[b, "original"])
        for a, b in itertools.combinations(originals, 2)
    ]
    assert min(unrelated) > DEFAULT_DISTANCE, sorted(unrelated)
    assert all(hashes[p, "copy"] == hashes[p, "original"] for p in originals)
