"""Real photos with planted duplicates, for the image dedup tests.

The bundled sample's eight photos (``corpora/data/sample/images``), each
with five copies: the same bytes under another URL (``copy``), re-encoded at
JPEG quality 60 (``q60``), resized by half (``half``), cropped by 5 % (2.5 %
from each side, ``crop``) and converted to PNG (``png``). The eight
originals are the unrelated photos: none may be merged with another.
"""

from __future__ import annotations

import io
import os

from PIL import Image

from corpora.config.bundled_sample import SAMPLE_IMAGES

PHOTOS = SAMPLE_IMAGES
EXACT = ("copy",)
NEAR = ("q60", "half", "crop", "png")
VARIANTS = ("original",) + EXACT + NEAR


def _encoded(image: Image.Image, fmt: str, **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


def planted() -> dict[tuple[str, str], bytes]:
    """``(photo, variant)`` → the bytes served for it."""
    found = {}
    for name in sorted(os.listdir(PHOTOS)):
        with open(os.path.join(PHOTOS, name), "rb") as stream:
            data = stream.read()
        photo = os.path.splitext(name)[0]
        image = Image.open(io.BytesIO(data)).convert("RGB")
        width, height = image.size
        dx, dy = round(width * 0.025), round(height * 0.025)
        found[photo, "original"] = data
        found[photo, "copy"] = data
        found[photo, "q60"] = _encoded(image, "JPEG", quality=60)
        found[photo, "half"] = _encoded(
            image.resize((width // 2, height // 2), Image.LANCZOS), "JPEG", quality=90
        )
        found[photo, "crop"] = _encoded(
            image.crop((dx, dy, width - dx, height - dy)), "JPEG", quality=90
        )
        found[photo, "png"] = _encoded(image, "PNG")
    return found
