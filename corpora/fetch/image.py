"""Decode, check, resize and re-encode one downloaded image.

Size, pixel-count and aspect checks read only the header, so a decompression
bomb is refused before anything is decoded. Resizing is img2dataset's
resizer (OpenCV), the same one img2dataset builds its datasets with.
"""

from __future__ import annotations

import io
import os
import threading
import warnings
from typing import Callable

from corpora.fetch.settings import FetchSettings, ImageOutcome

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")  # img2dataset imports albumentations

_RESIZERS: dict[FetchSettings, Callable] = {}
_RESIZER_LOCK = threading.Lock()


class _NoSuppress:
    def __enter__(self) -> None:
        pass

    def __exit__(self, *exc) -> None:
        pass


def resizer(settings: FetchSettings):
    """img2dataset's resizer for ``settings``, made once per process."""
    found = _RESIZERS.get(settings)
    if found is None:
        import img2dataset.resizer
        from img2dataset.resizer import ResizeMode, Resizer

        # The resizer silences OpenCV by dup2-ing /dev/null over fds 1 and 2 and
        # back. That is process-wide: from several decode threads at once, one
        # thread saves the other's /dev/null and "restores" it, and the worker's
        # stdout and stderr stay silenced for good. Truncated JPEGs, the warning
        # it hides, are refused before the resizer sees them (jpeg_complete).
        img2dataset.resizer.SuppressStdoutStderr = _NoSuppress

        with _RESIZER_LOCK:
            found = _RESIZERS.setdefault(
                settings,
                Resizer(
                    image_size=settings.image_size,
                    resize_mode=ResizeMode[settings.resize_mode],
                    resize_only_if_bigger=settings.resize_only_if_bigger,
                    encode_quality=settings.jpeg_quality,
                    encode_format="jpg",
                ),
            )
    return found


def jpeg_complete(data: bytes) -> bool:
    """A JPEG's last scan ends with EOI (FF D9); a truncated download does not.

    Scan data stuffs every FF byte (FF 00), so FF D9 after the last SOS marker
    is the real end of image. OpenCV decodes a truncated JPEG into a grey-
    padded image without error, so this check is what catches it.

    >>> whole = b"\\xff\\xd8 ... \\xff\\xda scan \\xff\\xd9"
    >>> jpeg_complete(whole), jpeg_complete(whole[:-4])
    (True, False)
    """
    last_scan = data.rfind(b"\xff\xda")
    return last_scan >= 0 and data.find(b"\xff\xd9", last_scan) >= 0


def _normalise(image) -> "object":
    """First frame, EXIF orientation applied, RGB (alpha matted on white, as img2dataset does)."""
    from PIL import Image, ImageOps

    image.seek(0)
    image.load()
    image = ImageOps.exif_transpose(image)
    if image.mode in ("P", "PA"):
        image = image.convert("RGBA")
    if image.mode in ("RGBA", "LA", "La", "RGBa"):
        image = image.convert("RGBA")
        background = Image.new("RGB", image.size, (255, 255, 255))
        background.paste(image, mask=image.getchannel("A"))
        return background
    if image.mode.startswith("I;16") or image.mode == "I":
        image = image.point(lambda v: v / 256).convert("L")
    return image.convert("RGB") if image.mode not in ("RGB", "L") else image


def process_image(data: bytes, settings: FetchSettings) -> ImageOutcome:
    """Check, decode, resize (img2dataset's resizer) and re-encode as JPEG.

    >>> process_image(b"", FetchSettings()).reason, process_image(b"<html>", FetchSettings()).reason
    ('empty_body', 'not_image')
    """
    try:
        return _process_image(data, settings)
    except Exception as exc:  # a corrupt header field (EXIF, ICC …) Pillow trips over
        return ImageOutcome(reason="decode_error", detail=f"{type(exc).__name__}: {exc}")


def _refused(reason: str, width: int, height: int) -> ImageOutcome:
    return ImageOutcome(
        reason=reason, detail=f"{width}x{height}", original_width=width, original_height=height
    )


def _process_image(data: bytes, settings: FetchSettings) -> ImageOutcome:
    from PIL import Image

    if not data:
        return ImageOutcome(reason="empty_body")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data))
    except Image.DecompressionBombError as exc:
        return ImageOutcome(reason="too_many_pixels", detail=str(exc))
    except Exception:  # Pillow raises many types for non-images
        return ImageOutcome(reason="not_image")
    with image:
        width, height = image.size
        if width < 1 or height < 1:
            return ImageOutcome(reason="decode_error", detail=f"size {width}x{height}")
        if width * height > settings.max_pixels:
            return _refused("too_many_pixels", width, height)
        if min(width, height) < settings.min_image_size:
            return _refused("image_too_small", width, height)
        if max(width, height) / min(width, height) > settings.max_aspect_ratio:
            return _refused("aspect_ratio_above_max", width, height)
        orientation = (
            image.getexif().get(0x0112, 1) if image.format in ("JPEG", "TIFF", "WEBP", "PNG") else 1
        )
        if image.format == "JPEG" and image.mode in ("RGB", "L") and orientation == 1:
            if not jpeg_complete(data):
                return ImageOutcome(reason="decode_error", detail="truncated JPEG")
            stream = io.BytesIO(data)  # OpenCV decodes plain JPEGs directly
        else:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    normalised = _normalise(image)
            except Exception as exc:  # truncated or corrupt data
                return ImageOutcome(reason="decode_error", detail=str(exc))
            stream = io.BytesIO()
            normalised.save(stream, "PPM")  # uncompressed hand-over to the resizer
    jpeg, out_w, out_h, original_w, original_h, error = resizer(settings)(stream)
    if error is not None or jpeg is None:
        return ImageOutcome(reason="decode_error", detail=str(error))
    return ImageOutcome(
        data=jpeg,
        width=out_w,
        height=out_h,
        original_width=original_w,
        original_height=original_h,
    )
