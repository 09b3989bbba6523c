"""Decode, check, resize and re-encode."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import io
import os
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from corpora.fetch import RESIZE_MODES, FetchSettings, process_image
from tests.corpora.fetch.common import FAST
from tests.generated import realistic_photo
from tests.servers import image_bytes, png_header_bomb

NO_RESIZE = dataclasses.replace(FAST, resize_mode="no")
_WHOLE = image_bytes(256, 256, "cut")
TRUNCATED = _WHOLE[: len(_WHOLE) * 2 // 3]  # what the server's /truncated route sends


def encode(image: Image.Image, fmt: str, **kwargs) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **kwargs)
    return buffer.getvalue()


def decoded(result) -> np.ndarray:
    assert result.reason is None, result
    return np.asarray(Image.open(io.BytesIO(result.data)).convert("RGB")).astype(int)


def test_an_image_is_resized_and_its_original_size_kept():
    result = process_image(image_bytes(100, 80, "ok"), FAST)
    assert Image.open(io.BytesIO(result.data)).size == (32, 32)
    assert (result.width, result.height, result.original_width, result.original_height) == (
        32,
        32,
        100,
        80,
    )


def test_exif_orientation_is_applied():
    image = Image.new("RGB", (40, 20), (200, 0, 0))
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90° clockwise on display
    result = process_image(encode(image, "JPEG", exif=exif), NO_RESIZE)
    assert (result.width, result.height) == (20, 40)


def test_cmyk_jpeg_becomes_rgb():
    image = Image.new("CMYK", (16, 16), (0, 255, 255, 0))  # red in CMYK
    pixel = decoded(process_image(encode(image, "JPEG"), NO_RESIZE))[8, 8]
    assert pixel[0] > 200 and pixel[1] < 60 and pixel[2] < 60


def test_palette_with_transparency_and_alpha_are_matted_on_white():
    palette = Image.new("P", (16, 16), 0)
    palette.putpalette([0, 0, 255] + [0, 0, 0] * 255)
    rgba = Image.new("RGBA", (16, 16), (255, 0, 0, 0))  # fully transparent red

    def centre(data: bytes) -> list[int]:
        return decoded(process_image(data, NO_RESIZE))[8, 8].tolist()

    assert centre(encode(palette, "PNG")) == pytest.approx([0, 0, 255], abs=3)  # JPEG is lossy
    assert centre(encode(palette, "PNG", transparency=0)) == pytest.approx([255] * 3, abs=3)
    assert centre(encode(rgba, "PNG")) == pytest.approx([255] * 3, abs=3)


def test_animated_gif_takes_the_first_frame():
    frames = [Image.new("RGB", (16, 16), colour) for colour in ((0, 255, 0), (255, 0, 0))]
    data = encode(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=100)
    pixel = decoded(process_image(data, NO_RESIZE))[8, 8]
    assert pixel[1] > 200 and pixel[0] < 60


def test_size_and_aspect_checks():
    settings = dataclasses.replace(FAST, min_image_size=50, max_aspect_ratio=2.0)
    small = process_image(image_bytes(40, 80, "s"), settings)
    assert (small.reason, small.original_width, small.original_height) == (
        "image_too_small",
        40,
        80,
    )
    assert process_image(image_bytes(300, 100, "a"), settings).reason == "aspect_ratio_above_max"
    assert process_image(image_bytes(100, 60, "fine"), settings).reason is None


def test_a_narrow_image_is_never_resized_into_a_bomb():
    """Issue 30, defect 1: a 1x12000 PNG of 100 bytes would be scaled on its
    shorter side to 336x4,032,000 (1.4 GB). By default its aspect ratio
    refuses it; where the user lifts that limit, the resize's output cap does,
    both from the header alone."""
    narrow = encode(Image.new("L", (1, 12_000)), "PNG")
    assert len(narrow) < 200
    settings = dataclasses.replace(FAST, image_size=336, resize_mode="center_crop")
    assert FetchSettings().max_aspect_ratio == 64
    assert process_image(narrow, settings).reason == "aspect_ratio_above_max"
    unlimited = dataclasses.replace(settings, max_aspect_ratio=float("inf"))
    outcome = process_image(narrow, unlimited)
    assert outcome.reason == "too_many_pixels"
    assert outcome.detail == "1x12000 would resize to 336x4032000 before the crop"
    # scaled on its longer side the same image is small, and is kept
    assert process_image(narrow, dataclasses.replace(unlimited, resize_mode="border")).ok


@pytest.mark.parametrize("field", ["max_aspect_ratio", "per_host_rate", "progress_interval"])
def test_nan_is_refused_where_a_number_is_compared(field):
    """Issue 30, defect 16: NaN passed every comparison and turned checks off."""
    with pytest.raises(ValueError, match=field.replace("_", " ")):
        FetchSettings(**{field: float("nan")})


@pytest.mark.parametrize(
    "data",
    [
        b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 8 8\nshowpage\n",  # Ghostscript's
        b"P6\n1 1\n255\n\x00\x00\x00",  # PPM: Pillow reads it, the docs do not list it
        encode(Image.new("RGB", (8, 8)), "PCX"),
    ],
    ids=["eps", "ppm", "pcx"],
)
def test_only_the_listed_formats_are_decoded(data):
    """Issue 30, defect 16: Pillow opened every format it knows, EPS through
    Ghostscript; a format docs/fetch.md does not list is not_image."""
    assert process_image(data, FAST).reason == "not_image"


@pytest.mark.parametrize("fmt", ["PNG", "WEBP", "GIF", "BMP", "TIFF", "AVIF"])
def test_the_listed_formats_are_decoded(fmt):
    assert process_image(encode(Image.new("RGB", (64, 48), (9, 99, 199)), fmt), FAST).ok


def test_a_decompression_bomb_is_refused_from_its_header():
    result = process_image(png_header_bomb(), FAST)
    assert result.reason == "too_many_pixels" and "400000000 pixels" in result.detail


@pytest.mark.parametrize(
    "data, reason",
    [
        (b"", "empty_body"),
        (b"<html><body>not an image</body></html>", "not_image"),
        (TRUNCATED, "decode_error"),
    ],
)
def test_what_is_not_a_whole_image_is_named(data, reason):
    assert process_image(data, FAST).reason == reason


def test_corrupt_image_data_is_a_decode_error():
    data = bytearray(image_bytes(64, 64, "corrupt", "PNG"))
    start = data.index(b"IDAT") + 4
    data[start : start + 40] = b"\x55" * 40  # wreck the compressed pixels (and the chunk's CRC)
    result = process_image(bytes(data), FAST)
    assert result.reason == "decode_error" and result.detail


def test_resize_modes_and_quality():
    data = image_bytes(120, 60, "modes")
    sizes = {
        mode: (r.width, r.height)
        for mode in RESIZE_MODES
        for r in [process_image(data, dataclasses.replace(FAST, resize_mode=mode))]
    }
    assert sizes == {
        "no": (120, 60),
        "border": (32, 32),
        "keep_ratio": (64, 32),
        "keep_ratio_largest": (32, 16),
        "center_crop": (32, 32),
    }
    low = process_image(data, dataclasses.replace(FAST, jpeg_quality=20))
    high = process_image(data, dataclasses.replace(FAST, jpeg_quality=98))
    assert len(low.data) < len(high.data)


def test_concurrent_decoding_leaves_stdout_and_stderr_alone():
    # img2dataset's resizer dup2()s /dev/null over fds 1 and 2; from several
    # decode threads at once that used to leave the process silenced for good.
    data = image_bytes(300, 200, "race")
    before = [os.fstat(fd).st_ino for fd in (1, 2)]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: process_image(data, FAST), range(200)))
    assert all(r.reason is None for r in results)
    assert [os.fstat(fd).st_ino for fd in (1, 2)] == before


# ---------------------------------------------------------------- the same bytes as img2dataset


def img2dataset_output(data: bytes, settings: FetchSettings):
    """What the fetch stage gave before it had its own resize: img2dataset's
    resizer on the JPEG itself, or on the normalised pixels as PPM."""
    os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")
    from img2dataset.resizer import ResizeMode, Resizer

    from corpora.fetch.image import _normalise

    image = Image.open(io.BytesIO(data))
    orientation = image.getexif().get(0x0112, 1)
    if image.format == "JPEG" and image.mode in ("RGB", "L") and orientation == 1:
        stream = io.BytesIO(data)
    else:
        stream = io.BytesIO()
        _normalise(image).save(stream, "PPM")
    resizer = Resizer(
        image_size=settings.image_size,
        resize_mode=ResizeMode[settings.resize_mode],
        resize_only_if_bigger=settings.resize_only_if_bigger,
        encode_quality=settings.jpeg_quality,
        encode_format="jpg",
    )
    jpeg, width, height, original_width, original_height, error = resizer(stream)
    assert error is None
    return jpeg, width, height, original_width, original_height


def with_orientation(data: bytes, orientation: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return encode(Image.open(io.BytesIO(data)), "JPEG", quality=90, exif=exif)


@pytest.fixture(scope="module")
def inputs() -> dict[str, bytes]:
    """Realistic photos (500-2,000 px, 100-400 KB), and the other ways in:
    grey, EXIF-rotated, PNG with alpha, smaller than the target."""
    photos = {f"photo {index}": realistic_photo(index) for index in range(4)}
    first = Image.open(io.BytesIO(photos["photo 0"]))
    photos["grey photo"] = encode(first.convert("L"), "JPEG", quality=90)
    photos["rotated photo"] = with_orientation(photos["photo 1"], 6)
    alpha = first.resize((300, 200)).convert("RGBA")
    alpha.putalpha(Image.linear_gradient("L").resize((300, 200)))
    photos["png with alpha"] = encode(alpha, "PNG")
    photos["small photo"] = encode(first.resize((150, 100)), "JPEG", quality=90)
    photos["small grey"] = encode(first.resize((90, 120)).convert("L"), "JPEG", quality=90)
    return photos


@pytest.mark.parametrize("resize_mode", RESIZE_MODES)
@pytest.mark.parametrize("image_size, only_if_bigger", [(224, False), (256, True), (333, False)])
def test_a_full_decode_gives_img2dataset_resizers_bytes(
    inputs, resize_mode, image_size, only_if_bigger
):
    settings = FetchSettings(
        image_size=image_size,
        resize_mode=resize_mode,
        resize_only_if_bigger=only_if_bigger,
        jpeg_quality=90,
    )
    for name, data in inputs.items():
        result = process_image(data, settings, reduced_decode=False)
        assert result.reason is None, (name, result)
        ours = (
            result.data,
            result.width,
            result.height,
            result.original_width,
            result.original_height,
        )
        assert ours == img2dataset_output(data, settings), name


def test_a_fetch_worker_imports_neither_img2dataset_nor_torch_nor_wandb():
    # img2dataset's package imports its downloader (webdataset → torch,
    # wandb): seconds of CPU in every worker that only wanted its resizer.
    code = (
        "import sys, pipelines.transforms\n"
        "from corpora.fetch import FetchSettings, process_image\n"
        "from tests.servers import image_bytes\n"
        "assert process_image(image_bytes(300, 200, 'x'), FetchSettings(image_size=64)).ok\n"
        "print(sorted({'img2dataset', 'albumentations', 'torch', 'wandb'} & set(sys.modules)))\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env, cwd=root
    )
    assert done.stdout.strip() == "[]"
