"""Decode, check, resize and re-encode one downloaded image.

Size, pixel-count and aspect checks read only the header, so a decompression
bomb is refused before anything is decoded. The resize is img2dataset's,
reproduced here operation for operation (OpenCV's area filter to shrink,
Lanczos to enlarge, albumentations' rounding, centre crop, white border), so
that a full decode gives byte for byte the JPEG img2dataset's resizer gives
(the tests compare them) without importing img2dataset, whose package
imports torch and wandb into every worker.

A large plain JPEG (a quarter of a megapixel or more) is decoded at 1/2,
1/4 or 1/8 of its size where that leaves the resize at least twice the
pixels it needs (:mod:`corpora.fetch.jpeg_draft`): about half the CPU of a web
photo, and an output
visually equal to the full decode's (PSNR at least 35 dB, tested), not
byte-equal.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
import warnings

from corpora.dedup.phash import phash_of_pixels
from corpora.fetch.jpeg_draft import (
    LONGER_SIDE_MODES,
    SHORTER_SIDE_MODES,
    reduced_read_flag,
    reduced_scale,
    resized_size,
)
from corpora.fetch.settings import FetchSettings, ImageOutcome
from corpora.record import open_image

_RESIZES: dict[FetchSettings, "Resize"] = {}
_RESIZES_LOCK = threading.Lock()


class Resize:
    """The resize and JPEG encode of one :class:`FetchSettings`, built once
    per process (:func:`resize_for`) and shared by the decode threads.

    ``pixels`` are OpenCV's: BGR, or one channel for a grey image.

    >>> import numpy as np
    >>> settings = FetchSettings(image_size=32, resize_mode="border")
    >>> jpeg, width, height = resize_for(settings)(np.zeros((30, 120, 3), np.uint8))
    >>> jpeg[:2], width, height
    (b'\\xff\\xd8', 32, 32)
    """

    def __init__(self, settings: FetchSettings):
        import cv2

        # One image per decode thread: the decode pool is the parallelism (as
        # img2dataset's resizer sets it).
        cv2.setNumThreads(1)
        self.cv2 = cv2
        self.image_size = settings.image_size
        self.resize_mode = settings.resize_mode
        self.resize_only_if_bigger = settings.resize_only_if_bigger
        self.encode_params = [int(cv2.IMWRITE_JPEG_QUALITY), settings.jpeg_quality]

    def __call__(self, pixels, scale: int = 1, width: int = 0, height: int = 0):
        """The JPEG of ``pixels`` resized, and its width and height.

        ``pixels`` were decoded at 1/``scale`` of ``width`` x ``height`` (the
        full size; for ``scale`` 1 they are the full image and the sizes may
        be left out).
        """
        if scale == 1:
            height, width = pixels.shape[:2]
        if self.resize_mode in SHORTER_SIDE_MODES:
            side = min(width, height)
        elif self.resize_mode in LONGER_SIDE_MODES:
            side = max(width, height)
        else:  # "no"
            side = None
        if side is not None and (side > self.image_size or not self.resize_only_if_bigger):
            pixels = self.fit(self.scaled(pixels, scale, width, height, side > self.image_size))
        jpeg = self.cv2.imencode(".jpg", pixels, params=self.encode_params)[1].tobytes()
        return jpeg, pixels.shape[1], pixels.shape[0]

    def scaled(self, pixels, scale: int, width: int, height: int, downscale: bool):
        """albumentations' ``SmallestMaxSize`` or ``LongestMaxSize``, as
        img2dataset calls them; a reduced decode (``scale`` > 1) is scaled by
        the exact factor and its padded last block cut off."""
        cv2 = self.cv2
        target_w, target_h = resized_size(width, height, self.image_size, self.resize_mode)
        if scale > 1:  # only ever taken to shrink, with room to spare (jpeg_draft)
            resized = cv2.resize(
                pixels,
                None,
                fx=scale * target_w / width,
                fy=scale * target_h / height,
                interpolation=cv2.INTER_AREA,
            )
            return resized[:target_h, :target_w]
        if (target_h, target_w) == pixels.shape[:2]:
            return pixels
        interpolation = cv2.INTER_AREA if downscale else cv2.INTER_LANCZOS4
        return cv2.resize(pixels, (target_w, target_h), interpolation=interpolation)

    def fit(self, pixels):
        """albumentations' ``CenterCrop`` (center_crop) or ``PadIfNeeded`` on
        white (border), as img2dataset calls them."""
        size = self.image_size
        height, width = pixels.shape[:2]
        if self.resize_mode == "center_crop":
            top, left = (height - size) // 2, (width - size) // 2
            return pixels[top : top + size, left : left + size]
        if self.resize_mode == "border":
            top = int((size - height) / 2.0) if height < size else 0
            left = int((size - width) / 2.0) if width < size else 0
            bottom, right = max(0, size - height - top), max(0, size - width - left)
            return self.cv2.copyMakeBorder(
                pixels,
                top,
                bottom,
                left,
                right,
                borderType=self.cv2.BORDER_CONSTANT,
                value=[255, 255, 255],
            )
        return pixels


def resize_for(settings: FetchSettings) -> Resize:
    """The :class:`Resize` of ``settings``, made once per process."""
    found = _RESIZES.get(settings)
    if found is None:
        with _RESIZES_LOCK:
            found = _RESIZES.setdefault(settings, Resize(settings))
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


def process_image(
    data: bytes, settings: FetchSettings, reduced_decode: bool = True
) -> ImageOutcome:
    """Check, decode, resize and re-encode as JPEG.

    ``reduced_decode=False`` decodes every image at full size: the output is
    then byte for byte img2dataset's.

    >>> process_image(b"", FetchSettings()).reason, process_image(b"<html>", FetchSettings()).reason
    ('empty_body', 'not_image')
    """
    try:
        outcome = _process_image(data, settings, reduced_decode)
    except Exception as exc:  # a corrupt header field (EXIF, ICC …) Pillow trips over
        return ImageOutcome(reason="decode_error", detail=f"{type(exc).__name__}: {exc}")
    if not outcome.ok:
        return outcome
    # the body's own sha256: the exact-duplicate rule's key (two encodings of one
    # photo may resize to the same bytes; they are near duplicates, not copies)
    return dataclasses.replace(outcome, source_sha256=hashlib.sha256(data).hexdigest())


def _refused(reason: str, width: int, height: int) -> ImageOutcome:
    return ImageOutcome(
        reason=reason, detail=f"{width}x{height}", original_width=width, original_height=height
    )


# The most pixels the resize may make before its crop or pad (48 MiB of RGB):
# a narrow image scaled on its shorter side grows with its aspect ratio (a
# 1x12000 PNG to 336x4,032,000 at image_size 336); one that would pass this
# is refused as too_many_pixels, before anything is decoded.
MAX_RESIZED_PIXELS = 1 << 24


def _process_image(data: bytes, settings: FetchSettings, reduced_decode: bool) -> ImageOutcome:
    from PIL import Image

    if not data:
        return ImageOutcome(reason="empty_body")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image = open_image(data)
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
        resized = resized_size(width, height, settings.image_size, settings.resize_mode)
        if settings.resize_mode != "no" and resized[0] * resized[1] > MAX_RESIZED_PIXELS:
            return ImageOutcome(
                reason="too_many_pixels",
                original_width=width,
                original_height=height,
                detail=f"{width}x{height} would resize to {resized[0]}x{resized[1]} "
                "before the crop",
            )
        orientation = (
            image.getexif().get(0x0112, 1) if image.format in ("JPEG", "TIFF", "WEBP", "PNG") else 1
        )
        if image.format == "JPEG" and image.mode in ("RGB", "L") and orientation == 1:
            if not jpeg_complete(data):
                return ImageOutcome(reason="decode_error", detail="truncated JPEG")
            # Pillow has read only the header: OpenCV decodes the pixels, once.
            return _resized_jpeg(data, width, height, image.mode == "L", settings, reduced_decode)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                normalised = _normalise(image)
        except Exception as exc:  # truncated or corrupt data
            return ImageOutcome(reason="decode_error", detail=str(exc))
    return _resized(_opencv_pixels(normalised), settings)


def _resized_jpeg(
    data: bytes, width: int, height: int, grey: bool, settings: FetchSettings, reduced: bool
) -> ImageOutcome:
    import cv2
    import numpy as np

    scale = (
        reduced_scale(width, height, settings.image_size, settings.resize_mode) if reduced else 1
    )
    flag = cv2.IMREAD_UNCHANGED if scale == 1 else reduced_read_flag(scale, grey)
    pixels = cv2.imdecode(np.frombuffer(data, np.uint8), flag)
    if pixels is None:
        return ImageOutcome(reason="decode_error", detail="Image decoding error")
    if scale == 1:
        return _resized(pixels, settings)
    jpeg, out_w, out_h = resize_for(settings)(pixels, scale, width, height)
    return ImageOutcome(
        data=jpeg,
        width=out_w,
        height=out_h,
        original_width=width,
        original_height=height,
        phash=phash_of_pixels(pixels) if settings.perceptual_hash else None,
    )


def _opencv_pixels(image):
    """A normalised Pillow image (RGB or L) as OpenCV's pixels (BGR or grey)."""
    import cv2
    import numpy as np

    pixels = np.asarray(image)
    return cv2.cvtColor(pixels, cv2.COLOR_RGB2BGR) if pixels.ndim == 3 else pixels


def _resized(pixels, settings: FetchSettings) -> ImageOutcome:
    """The outcome of resizing fully decoded ``pixels``; the original size is
    the decoded one (EXIF orientation applied), as img2dataset reports it."""
    jpeg, out_w, out_h = resize_for(settings)(pixels)
    return ImageOutcome(
        data=jpeg,
        width=out_w,
        height=out_h,
        original_width=pixels.shape[1],
        original_height=pixels.shape[0],
        phash=phash_of_pixels(pixels) if settings.perceptual_hash else None,
    )
