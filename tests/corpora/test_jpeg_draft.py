"""Reduced-size JPEG decoding: the resize sees enough pixels, ends at today's
size, and its output stays visually equal to today's full decode."""

from __future__ import annotations

import io
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from corpora import jpeg_draft
from corpora.fetch import FetchSettings, process_image
from tests.generated import realistic_photo

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")
RESIZING_MODES = jpeg_draft.SHORTER_SIDE_MODES + jpeg_draft.LONGER_SIDE_MODES

sides = st.integers(1, 5000)
targets = st.integers(1, 1000)
modes = st.sampled_from(RESIZING_MODES + ("no",))


def today_resizer(image_size: int, resize_mode: str):
    """The resizer the fetch stage calls today (img2dataset's), as it builds it."""
    from img2dataset.resizer import ResizeMode, Resizer

    return Resizer(
        image_size=image_size,
        resize_mode=ResizeMode[resize_mode],
        resize_only_if_bigger=False,
        encode_quality=95,
        encode_format="jpg",
    )


def reduced_path(data: bytes, image_size: int, resize_mode: str) -> tuple[bytes, int]:
    """Decode through Pillow's draft, hand the pixels over as PPM (as the fetch
    stage already does for images it normalises), resize with today's resizer."""
    image = Image.open(io.BytesIO(data))
    scale = jpeg_draft.draft(image, image_size, resize_mode)
    image.load()
    stream = io.BytesIO()
    image.save(stream, "PPM")
    jpeg, *_, error = today_resizer(image_size, resize_mode)(stream)
    assert error is None
    return jpeg, scale


def pixels(jpeg: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(jpeg)).convert("RGB"), np.float64)


def psnr(a: bytes, b: bytes) -> float:
    x, y = pixels(a), pixels(b)
    assert x.shape == y.shape
    mse = float(((x - y) ** 2).mean())
    return float("inf") if mse == 0 else 10 * np.log10(255**2 / mse)


@settings(max_examples=300, deadline=None)
@given(sides, sides, targets, modes)
def test_a_reduction_never_leaves_the_resize_fewer_pixels_than_it_needs(
    width, height, image_size, resize_mode
):
    scale = jpeg_draft.reduced_scale(width, height, image_size, resize_mode)
    assert scale in (1,) + jpeg_draft.SCALES
    if scale == 1:
        return
    assert resize_mode != "no"
    assert width % scale == 0 and height % scale == 0  # libjpeg pads no partial block
    reduced = (width // scale, height // scale)
    side = min if resize_mode in jpeg_draft.SHORTER_SIDE_MODES else max
    assert side(*reduced) >= jpeg_draft.MARGIN * image_size
    assert jpeg_draft.resized_size(*reduced, image_size, resize_mode) == (
        jpeg_draft.resized_size(width, height, image_size, resize_mode)
    )


@settings(max_examples=300, deadline=None)
@given(sides, sides, targets, modes)
def test_a_photo_turned_by_exif_orientation_gets_the_same_reduction(
    width, height, image_size, resize_mode
):
    assert jpeg_draft.reduced_scale(width, height, image_size, resize_mode) == (
        jpeg_draft.reduced_scale(height, width, image_size, resize_mode)
    )


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 2500), st.integers(1, 2500), st.integers(1, 600), st.sampled_from(RESIZING_MODES)
)
def test_resized_size_is_the_size_albumentations_resizes_to(width, height, image_size, mode):
    import albumentations as A
    import cv2

    transform = (A.SmallestMaxSize if mode in jpeg_draft.SHORTER_SIDE_MODES else A.LongestMaxSize)(
        max_size=image_size, interpolation=cv2.INTER_AREA, p=1.0
    )
    resized = transform(image=np.zeros((height, width, 1), np.uint8))["image"]
    assert jpeg_draft.resized_size(width, height, image_size, mode) == (
        resized.shape[1],
        resized.shape[0],
    )


def jpeg(width: int, height: int, mode: str = "RGB") -> bytes:
    gradient = np.add.outer(np.arange(height) % 251, np.arange(width) % 241).astype(np.uint8)
    image = Image.fromarray(gradient, "L").convert(mode)
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=90)
    return buffer.getvalue()


@settings(max_examples=40, deadline=None)
@given(
    st.integers(4, 150).map(lambda n: 8 * n),
    st.integers(4, 150).map(lambda n: 8 * n),
    st.integers(8, 300),
    st.sampled_from(RESIZING_MODES),
    st.sampled_from(("RGB", "L")),
)
def test_pillow_decodes_at_the_chosen_scale_and_the_resize_ends_at_todays_size(
    width, height, image_size, resize_mode, mode
):
    data = jpeg(width, height, mode)
    image = Image.open(io.BytesIO(data))
    scale = jpeg_draft.draft(image, image_size, resize_mode)
    assert scale == jpeg_draft.reduced_scale(width, height, image_size, resize_mode)
    image.load()
    assert image.size == (width // scale, height // scale)
    today = process_image(data, FetchSettings(image_size=image_size, resize_mode=resize_mode))
    reduced, _ = reduced_path(data, image_size, resize_mode)
    assert Image.open(io.BytesIO(reduced)).size == (today.width, today.height)


def test_formats_other_than_jpeg_and_resize_mode_no_decode_at_full_size():
    image = Image.new("RGB", (1600, 1600), (10, 20, 30))
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    png = Image.open(io.BytesIO(buffer.getvalue()))
    assert jpeg_draft.draft(png, 224, "center_crop") == 1
    assert png.size == (1600, 1600)
    photo = Image.open(io.BytesIO(jpeg(1600, 1600)))
    assert jpeg_draft.draft(photo, 224, "no") == 1
    photo.load()
    assert photo.size == (1600, 1600)


# Every bundled photograph at two sizes common on the web, the grain making
# them as heavy as real photos (see realistic_photo); the grass and brick
# textures are the hardest case for a second filter after libjpeg's.
PHOTOS = [(index, long_side) for index in range(8) for long_side in (1280, 1920)]


@pytest.fixture(scope="module")
def photos() -> list[bytes]:
    return [realistic_photo(index, long_side) for index, long_side in PHOTOS]


@pytest.mark.parametrize(
    "image_size, resize_mode", [(224, "center_crop"), (336, "center_crop"), (224, "border")]
)
def test_reduced_decode_output_is_visually_equal_to_todays_on_real_size_photos(
    photos, image_size, resize_mode
):
    settings = FetchSettings(image_size=image_size, resize_mode=resize_mode)
    reduced_count = 0
    for (index, long_side), data in zip(PHOTOS, photos):
        assert 100_000 <= len(data) <= 400_000
        today = process_image(data, settings)
        reduced, scale = reduced_path(data, image_size, resize_mode)
        reduced_count += scale > 1
        quality = psnr(today.data, reduced)
        assert quality >= 35.0, f"photo {index} at {long_side} px, 1/{scale}: {quality:.1f} dB"
    assert reduced_count >= 4  # the bound is checked on reduced decodes, not only full ones
