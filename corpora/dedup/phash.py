"""A perceptual hash of an image: 64 bits that change little when a photo
is re-encoded, resized or slightly cropped, and a lot between two photos.

The hash is ``imagehash``'s pHash (the DCT of a 32 x 32 grey image, its 8 x 8
lowest frequencies compared with their median), computed in the fetch stage
on the pixels it has already decoded (:func:`phash_of_pixels`), so no image
is decoded twice. Pixels are first shrunk to :data:`PRESHRINK` on a side
(every n-th pixel down to at least twice that, then OpenCV's area
filter): pHash looks at 32 x 32 anyway, and a grey conversion and filter over
every pixel of a photo cost a tenth of its decode (measured: docs/dedup.md).

Two hashes are near when their Hamming distance (:func:`hamming`) is at most
the build's radius (``--near-dup-distance``, :data:`DEFAULT_DISTANCE`).

>>> import numpy as np
>>> noise = np.random.default_rng(0).integers(0, 256, (48, 64), dtype=np.uint8)
>>> phash_hex(phash_of_pixels(noise))
'8b0b24f6f04e91be'
>>> hamming(phash_of_pixels(noise), phash_of_pixels(noise // 2 + 20))  # contrast halved: same
0
>>> hamming(phash_of_pixels(noise), phash_of_pixels(255 - noise))  # the negative: far
62
"""

from __future__ import annotations

import functools
import math

PHASH_BITS = 64
# Measured on the bundled sample's photos (tests/corpora/dedup/test_phash.py):
# re-encoded at quality 60, halved and converted to PNG they stay within 4 bits,
# cropped by 5 % within 12 (one texture, brick, at 22); two different photos
# are 24 bits apart or more.
DEFAULT_DISTANCE = 12
PRESHRINK = 64
HASH_SIDE, HIGHFREQ_FACTOR = 8, 4  # imagehash.phash's defaults: 8 x 8 bits of a 32 x 32 DCT


def phash_of_pixels(pixels) -> int:
    """The 64-bit pHash of OpenCV pixels (BGR, BGRA or one grey channel), as an int.

    The bits are ``imagehash.phash``'s (its 32 x 32 Lanczos resize, the same
    SciPy DCT, its median; tests/corpora/dedup/test_phash.py checks them
    equal), computed without its per-call overhead: no grey conversion of an
    image already grey, no hex string, and a median of 64 values by sorting
    them (a third of this function's CPU went to ``np.median`` and the
    string, measured in the fetch stage at 2,000 photos); Pillow's Lanczos
    resize of the 64 x 64 pre-shrunk pixels as two matrix products
    (:func:`_lanczos`: 70 us of Pillow image objects and calls a photo).
    """
    import cv2
    import numpy as np
    from PIL import Image
    from scipy.fftpack import dct

    height, width = pixels.shape[:2]
    step = min(height, width) // (2 * PRESHRINK)
    if step > 1:  # every step-th pixel first: the area filter then averages 2 x 2 or more
        pixels = _every(pixels, step)
    if pixels.ndim == 3:
        code = cv2.COLOR_BGRA2GRAY if pixels.shape[2] == 4 else cv2.COLOR_BGR2GRAY
        pixels = cv2.cvtColor(np.ascontiguousarray(pixels), code)
    if max(height, width) > PRESHRINK:
        pixels = cv2.resize(pixels, (PRESHRINK, PRESHRINK), interpolation=cv2.INTER_AREA)
    if pixels.dtype != "uint8":  # 16-bit PNGs decoded unchanged
        pixels = (pixels >> 8).astype("uint8")
    side = HASH_SIDE * HIGHFREQ_FACTOR
    if pixels.shape == (PRESHRINK, PRESHRINK):  # every image larger than PRESHRINK
        small = _lanczos(pixels, _lanczos_weights(PRESHRINK, side))
    else:
        small = np.asarray(Image.fromarray(pixels).resize((side, side), Image.LANCZOS))
    low = dct(dct(small, axis=0), axis=1)[:HASH_SIDE, :HASH_SIDE]
    ordered = np.sort(low, axis=None)
    middle = ordered.size // 2  # np.median of an even count: the mean of the middle two
    median = (ordered[middle - 1] + ordered[middle]) / 2
    return int.from_bytes(np.packbits(low > median).tobytes(), "big")


_PRECISION_BITS = 22  # Pillow's fixed point for 8-bit resampling (Resample.c)


@functools.lru_cache(maxsize=4)
def _lanczos_weights(in_size: int, out_size: int):
    """Pillow's Lanczos weights from ``in_size`` to ``out_size`` pixels as a
    dense (in_size, out_size) matrix of its fixed-point integers (as floats),
    computed as Resample.c's ``precompute_coeffs`` and
    ``normalize_coeffs_8bpc`` compute them, operation for operation."""
    import numpy as np

    scale = in_size / out_size
    filterscale = max(scale, 1.0)
    support = 3.0 * filterscale
    weights = np.zeros((in_size, out_size))
    for xx in range(out_size):
        center = (xx + 0.5) * scale
        first = max(int(center - support + 0.5), 0)  # C's (int): toward zero
        count = min(int(center + support + 0.5), in_size) - first
        ss = 1.0 / filterscale
        k = [_lanczos_filter((x + first - center + 0.5) * ss) for x in range(count)]
        total = sum(k)  # Resample.c adds them in this order too
        for x, w in enumerate(k):
            w = w / total if total != 0.0 else w
            fixed = w * (1 << _PRECISION_BITS)
            weights[first + x, xx] = int(fixed - 0.5) if w < 0 else int(fixed + 0.5)
    return weights


def _lanczos_filter(x: float) -> float:
    def sinc(x: float) -> float:
        if x == 0.0:
            return 1.0
        x = x * math.pi
        return math.sin(x) / x

    return sinc(x) * sinc(x / 3) if -3.0 <= x < 3.0 else 0.0


def _lanczos(pixels, weights):
    """Pillow's ``Image.resize(..., LANCZOS)`` of 8-bit grey ``pixels`` (square,
    ``weights``' size), bit for bit (tests/corpora/dedup/test_phash.py), by two
    matrix products instead of an image object and its call: a horizontal
    pass, then a vertical one, each a sum of integer products (exact in
    float64: every partial sum is an integer below 2**53) plus a half, shifted
    down by the fixed point and clipped to 0..255, as Resample.c does.

    >>> import numpy as np
    >>> from PIL import Image
    >>> noise = np.random.default_rng(1).integers(0, 256, (64, 64), dtype=np.uint8)
    >>> checks = np.indices((64, 64)).sum(axis=0) % 2 * 255  # over- and undershoots: clipped
    >>> pillow = lambda a: np.asarray(Image.fromarray(a).resize((32, 32), Image.LANCZOS))
    >>> weights = _lanczos_weights(64, 32)
    >>> [bool((_lanczos(a, weights) == pillow(a)).all()) for a in (noise, checks.astype(np.uint8))]
    [True, True]
    """
    import numpy as np

    half, unit = float(1 << (_PRECISION_BITS - 1)), float(1 << _PRECISION_BITS)
    rows = np.clip(np.floor((pixels @ weights + half) / unit), 0, 255)
    return np.clip(np.floor((weights.T @ rows + half) / unit), 0, 255).astype(np.uint8)


def _every(pixels, step: int):
    """``pixels[::step, ::step]``, copied whole pixels at a time (numpy copies a
    strided view of a colour image byte by byte, a third slower).

    >>> import numpy as np
    >>> pixels = np.arange(5 * 7 * 3, dtype=np.uint8).reshape(5, 7, 3)
    >>> bool((_every(pixels, 3) == pixels[::3, ::3]).all()), _every(pixels, 3).shape
    (True, (2, 3, 3))
    """
    import numpy as np

    if pixels.ndim != 3 or not pixels.flags.c_contiguous:
        return np.ascontiguousarray(pixels[::step, ::step])
    height, width, channels = pixels.shape
    whole = pixels.view(np.dtype((np.void, channels * pixels.itemsize)))  # (height, width, 1)
    taken = np.ascontiguousarray(whole[::step, ::step])
    return taken.view(pixels.dtype).reshape(taken.shape[0], taken.shape[1], channels)


def phash_of_image(data: bytes) -> int:
    """The pHash of encoded image bytes (an evaluation image, a test's photo),
    decoded as the fetch stage decodes them.

    >>> from PIL import Image
    >>> import io
    >>> buffer = io.BytesIO()
    >>> Image.new("RGB", (40, 30), (200, 10, 10)).save(buffer, "PNG")
    >>> phash_hex(phash_of_image(buffer.getvalue()))
    '8000000000000000'
    """
    import numpy as np
    from PIL import ImageOps

    from corpora.record import open_image

    with open_image(data) as image:
        image = ImageOps.exif_transpose(image).convert("L")
        return phash_of_pixels(np.asarray(image))


def hamming(a: int, b: int) -> int:
    """The number of bits in which ``a`` and ``b`` differ.

    >>> hamming(0b1011, 0b0010)
    2
    """
    return (a ^ b).bit_count()


def phash_hex(value: int) -> str:
    """A hash as 16 hex digits (how parquets and reports write it).

    >>> phash_hex(255), parse_phash("00000000000000ff")
    ('00000000000000ff', 255)
    """
    return f"{value:016x}"


def parse_phash(text: str) -> int:
    """A hash written as hex digits (an optional ``0x``), as an int.

    >>> parse_phash("0x10")
    16
    """
    value = int(text, 16)
    if not 0 <= value < 1 << PHASH_BITS:
        raise ValueError(f"a perceptual hash has {PHASH_BITS} bits; {text!r} has more")
    return value
