"""Reduced-size JPEG decoding: let libjpeg shrink a photo while it decodes.

A JPEG stores 8x8 blocks of DCT coefficients, and libjpeg can decode them
straight to 1/2, 1/4 or 1/8 of the full size (its DCT scaling, reached through
OpenCV's ``IMREAD_REDUCED_*`` flags, the same decode as Pillow's ``draft``)
for a fraction of the cost of a full decode. Most web photos are far larger
than the 224-336 px a model is fed, so the resize only needs a part of the
pixels the full decode produces.

The resize that follows is the fetch stage's own (:mod:`corpora.fetch.image`:
the shorter side, or for ``border`` and ``keep_ratio_largest`` the longer
side, scaled to ``image_size`` with OpenCV's area filter, then cropped or
padded), with two changes that keep its output visually equal to the full
decode's (PSNR at least 35 dB, checked by the tests on photos of real size
and weight):

- the reduced image is scaled by the exact factor ``scale * target / side``
  and cut to the target size. libjpeg rounds a reduced side up, padding the
  last block; scaling the padded image to the integer target would land the
  picture up to half a pixel off, which costs fine textures 6-10 dB.
- a reduction by 1/``scale`` is taken only where the side the resize scales
  is still at least ``margin`` (2) times ``image_size`` after it, so the area
  filter still averages at least two decoded pixels per output pixel: a box
  filter right after libjpeg's block averaging then acts like the one wider
  box of the full decode (closer to the target, grass-like textures drop to
  30-34 dB).

A 4,032 x 3,024 phone photo bound for 336 px decodes at 1/4 (756 px short
side, at least 2 x 336); bound for 224 px, 1/8 would leave 378 px, under
2 x 224, so it also decodes at 1/4:

>>> reduced_scale(4032, 3024, 336, "center_crop"), reduced_scale(4032, 3024, 224, "center_crop")
(4, 4)

A 1,920 x 1,080 photo halves for 224 px but not for 336 px (540 < 672); so
does a 2,001 x 1,501 one (its last block padded); ``resize_mode="no"``,
which keeps every pixel, decodes at full size:

>>> reduced_scale(1920, 1080, 224, "center_crop"), reduced_scale(1920, 1080, 336, "center_crop")
(2, 1)
>>> reduced_scale(2001, 1501, 224, "center_crop"), reduced_scale(4032, 3024, 224, "no")
(2, 1)

``keep_ratio_largest`` and ``border`` scale the longer side:

>>> reduced_scale(4000, 1000, 1000, "keep_ratio_largest")
2

An image under a quarter of a megapixel decodes at full size whatever the
target: its full decode costs about a millisecond, the saving is a fraction
of that, and small images then stay byte for byte what img2dataset's resizer
gives them (the recorded builds of ``tests/cli/test_build_bytes.py`` hold
one such 250 x 163 image bound for 32 px):

>>> reduced_scale(250, 163, 32, "center_crop"), reduced_scale(640, 400, 32, "center_crop")
(1, 4)

The rule depends on the two sides only through the shorter and the longer,
so it holds for a photo that EXIF orientation turns by 90 degrees.
"""

from __future__ import annotations

# libjpeg's DCT scaling: 1/8, 1/4, 1/2 of each side.
SCALES = (8, 4, 2)
MARGIN = 2.0
MIN_PIXELS = 250_000
SHORTER_SIDE_MODES = ("center_crop", "keep_ratio")
LONGER_SIDE_MODES = ("border", "keep_ratio_largest")


def resized_size(width: int, height: int, image_size: int, resize_mode: str) -> tuple[int, int]:
    """Width and height after the resize's scaling step, before any crop or pad.

    The same arithmetic as albumentations' ``SmallestMaxSize`` (center_crop,
    keep_ratio) and ``LongestMaxSize`` (border, keep_ratio_largest), which
    img2dataset's resizer calls (Python's ``round``: halves to even);
    ``no`` keeps the size.

    >>> resized_size(1001, 750, 224, "center_crop"), resized_size(1001, 750, 224, "border")
    ((299, 224), (224, 168))
    """
    if resize_mode in SHORTER_SIDE_MODES:
        scale = image_size / min(height, width)
    elif resize_mode in LONGER_SIDE_MODES:
        scale = image_size / max(height, width)
    else:
        return width, height
    return max(1, round(width * scale)), max(1, round(height * scale))


def reduced_scale(
    width: int, height: int, image_size: int, resize_mode: str, margin: float = MARGIN
) -> int:
    """The largest DCT scale denominator (8, 4, 2, else 1: full size) that
    leaves the side the resize scales at least ``margin`` times
    ``image_size`` (counting the exact ``side / scale``, not libjpeg's
    rounded-up side), for an image of at least :data:`MIN_PIXELS`."""
    if width * height < MIN_PIXELS:
        return 1
    if resize_mode in SHORTER_SIDE_MODES:
        side = min(width, height)
    elif resize_mode in LONGER_SIDE_MODES:
        side = max(width, height)
    else:  # "no": every pixel is kept
        return 1
    for scale in SCALES:
        if side >= margin * image_size * scale and side > image_size * scale:
            return scale
    return 1


def reduced_read_flag(scale: int, grey: bool) -> int:
    """OpenCV's ``imdecode`` flag for a decode at 1/``scale``: colour (BGR)
    or grey as the JPEG is, EXIF orientation not applied (the caller reduces
    only photos without one)."""
    import cv2

    flags = {
        (2, False): cv2.IMREAD_REDUCED_COLOR_2,
        (4, False): cv2.IMREAD_REDUCED_COLOR_4,
        (8, False): cv2.IMREAD_REDUCED_COLOR_8,
        (2, True): cv2.IMREAD_REDUCED_GRAYSCALE_2,
        (4, True): cv2.IMREAD_REDUCED_GRAYSCALE_4,
        (8, True): cv2.IMREAD_REDUCED_GRAYSCALE_8,
    }
    return flags[scale, grey] | cv2.IMREAD_IGNORE_ORIENTATION
