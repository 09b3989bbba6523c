"""Reduced-size JPEG decoding: let libjpeg shrink a photo while it decodes.

A JPEG stores 8x8 blocks of DCT coefficients, and libjpeg can decode them
straight to 1/2, 1/4 or 1/8 of the full size (its DCT scaling, reached through
Pillow's :meth:`PIL.Image.Image.draft`) for a fraction of the cost of a full
decode. Most web photos are far larger than the 224-336 px a model is fed,
so the resize only needs a part of the pixels the full decode produces.

The resize that follows stays the one the fetch stage uses today
(img2dataset's resizer: the shorter side, or for ``border`` and
``keep_ratio_largest`` the longer side, scaled to ``image_size`` with
OpenCV's area filter, then cropped or padded). A reduction by 1/``scale`` is
taken only when the resize's output stays visually equal to today's (PSNR
at least 35 dB, checked by the tests on photos of real size and weight):

- ``scale`` divides both sides. libjpeg rounds a reduced side up, padding the
  last block, and the resizer scales the padded image to its integer target:
  the picture lands up to half a pixel off, which costs fine textures 6-10 dB.
- the side the resize scales is still at least ``margin`` (2) times
  ``image_size`` after the reduction, so the area filter that follows still
  averages at least two decoded pixels per output pixel: a box filter after
  libjpeg's block averaging then acts like today's one wider box (closer to
  the target, grass-like textures drop to 30-34 dB).
- the resize ends at exactly the same width and height as from the full
  image, so crop, pad and the reported size are today's.

A 4,032 x 3,024 phone photo bound for 336 px decodes at 1/4 (756 px short
side, at least 2 x 336); bound for 224 px, 1/8 would leave 378 px, under
2 x 224, so it also decodes at 1/4:

>>> reduced_scale(4032, 3024, 336, "center_crop"), reduced_scale(4032, 3024, 224, "center_crop")
(4, 4)

A 1,920 x 1,080 photo halves for 224 px but not for 336 px (540 < 672); a
side that no scale divides, and ``resize_mode="no"`` (which keeps every
pixel), decode at full size:

>>> reduced_scale(1920, 1080, 224, "center_crop"), reduced_scale(1920, 1080, 336, "center_crop")
(2, 1)
>>> reduced_scale(2001, 1500, 224, "center_crop"), reduced_scale(4032, 3024, 224, "no")
(1, 1)

``keep_ratio_largest`` and ``border`` scale the longer side:

>>> reduced_scale(4000, 1000, 1000, "keep_ratio_largest")
2

The rule depends on the two sides only through the shorter and the longer,
so it holds for a photo that EXIF orientation turns by 90 degrees after
decoding. The resizer reports the size it decoded as the original size, so
the caller keeps the header's size (``image.size`` before :func:`draft`).
"""

from __future__ import annotations

from typing import Any

# libjpeg's DCT scaling as Pillow's draft offers it: 1/8, 1/4, 1/2 of each side.
SCALES = (8, 4, 2)
MARGIN = 2.0
SHORTER_SIDE_MODES = ("center_crop", "keep_ratio")
LONGER_SIDE_MODES = ("border", "keep_ratio_largest")


def resized_size(width: int, height: int, image_size: int, resize_mode: str) -> tuple[int, int]:
    """Width and height after the resizer's scaling step, before any crop or pad.

    The same arithmetic as albumentations' ``SmallestMaxSize`` (center_crop,
    keep_ratio) and ``LongestMaxSize`` (border, keep_ratio_largest), which
    img2dataset's resizer calls; ``no`` keeps the size.

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
    divides both sides, leaves the side the resize scales at least ``margin``
    times ``image_size``, and lets the resize end at the same size."""
    if resize_mode in SHORTER_SIDE_MODES:
        scaled_side = min
    elif resize_mode in LONGER_SIDE_MODES:
        scaled_side = max
    else:  # "no": every pixel is kept
        return 1
    target = resized_size(width, height, image_size, resize_mode)
    for scale in SCALES:
        if width % scale or height % scale:
            continue
        reduced = (width // scale, height // scale)
        if (
            scaled_side(*reduced) >= margin * image_size
            and scaled_side(*reduced) > image_size  # the resize still shrinks: same filter
            and resized_size(*reduced, image_size, resize_mode) == target
        ):
            return scale
    return 1


def draft(image: Any, image_size: int, resize_mode: str, margin: float = MARGIN) -> int:
    """Ask Pillow to decode ``image`` (opened, not yet loaded) at reduced size.

    Returns the scale denominator it will decode at (1: full size, which is
    what anything but a JPEG gets). ``image.size`` is the reduced size
    afterwards; the pixels are decoded on ``image.load()``.
    """
    if image.format != "JPEG":
        return 1
    width, height = image.size
    scale = reduced_scale(width, height, image_size, resize_mode, margin)
    if scale == 1:
        return 1
    # Pillow picks the largest scale at which each side stays at least the
    # requested one: asking for exactly the reduced sides gives ``scale``.
    if image.draft(image.mode, (width // scale, height // scale)) is None:
        return 1  # a JPEG Pillow cannot scale (more than one tile)
    return scale
