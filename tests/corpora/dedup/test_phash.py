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


def _imagehash_phash(pixels) -> int:
    """What phash_of_pixels computed through imagehash before it did the same
    steps itself: the pre-shrunk grey pixels, imagehash.phash, its hex string."""
    import cv2
    import imagehash
    import numpy as np
    from PIL import Image

    height, width = pixels.shape[:2]
    step = min(height, width) // 128
    if step > 1:
        pixels = pixels[::step, ::step]
    if pixels.ndim == 3:
        code = cv2.COLOR_BGRA2GRAY if pixels.shape[2] == 4 else cv2.COLOR_BGR2GRAY
        pixels = cv2.cvtColor(np.ascontiguousarray(pixels), code)
    if max(height, width) > 64:
        pixels = cv2.resize(pixels, (64, 64), interpolation=cv2.INTER_AREA)
    if pixels.dtype != "uint8":
        pixels = (pixels >> 8).astype("uint8")
    return int(str(imagehash.phash(Image.fromarray(pixels))), 16)


def test_the_hash_is_imagehash_phash_bit_for_bit():
    import cv2
    import numpy as np

    from corpora.dedup.phash import phash_of_pixels

    rng = np.random.default_rng(26)
    photos = [
        cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
        for (_, variant), data in sorted(planted().items())
        if variant in ("original", "half", "png")
    ]
    arrays = (
        photos
        + [
            cv2.cvtColor(photos[0], cv2.COLOR_BGR2GRAY),
            cv2.cvtColor(photos[1], cv2.COLOR_BGR2BGRA),
            photos[2].astype(np.uint16) * 257,  # 16 bits, as a PNG decodes unchanged
            photos[3][::-1, 7:],  # not contiguous
            rng.integers(0, 256, (48, 64), dtype=np.uint8),
            rng.integers(0, 256, (700, 500, 3), dtype=np.uint8),
            np.full((300, 400, 3), 9, np.uint8),
        ]
    )
    assert [phash_of_pixels(a) for a in arrays] == [_imagehash_phash(a) for a in arrays]
