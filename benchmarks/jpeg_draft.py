"""Reduced-size JPEG decode: rules for taking a DCT scale, against today's output.

    python benchmarks/jpeg_draft.py                    # 224 px center crop, the realistic photos
    python benchmarks/jpeg_draft.py --image-size 336

For each rule: the share of photos it decodes reduced, the worst PSNR of the
final JPEG against today's fetch output (``corpora.fetch.process_image``) and
the CPU ms per image of decode + resize + encode in one thread. The photos
are ``benchmarks/e2e.py``'s realistic ones (500-2,000 px, 100-400 KB).
"fractional" rows resize the decoded image (last block padded) with the
exact scale ``s * target / side`` in ``cv2.resize`` and crop as
albumentations' ``CenterCrop`` does, instead of today's resizer.
"""

from __future__ import annotations

import argparse
import glob
import io
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import cv2  # noqa: E402
import numpy as np  # noqa: E402
from PIL import Image  # noqa: E402

from benchmarks.e2e import photo_dir  # noqa: E402
from corpora.fetch import FetchSettings, _resizer, process_image  # noqa: E402
from corpora.jpeg_draft import SCALES, reduced_scale, resized_size  # noqa: E402

MODE = "center_crop"


def psnr(a: bytes, b: bytes) -> float:
    x = cv2.imdecode(np.frombuffer(a, np.uint8), cv2.IMREAD_COLOR).astype(np.float64)
    y = cv2.imdecode(np.frombuffer(b, np.uint8), cv2.IMREAD_COLOR).astype(np.float64)
    mse = float(((x - y) ** 2).mean())
    return float("inf") if mse == 0 else 10 * np.log10(255**2 / mse)


def any_scale(width: int, height: int, size: int, margin: float) -> int:
    """A scale whose rounded-up decode leaves at least ``margin`` x the target."""
    for scale in SCALES:
        reduced = (-(-width // scale), -(-height // scale))
        if (
            min(reduced) > size
            and min(reduced) >= margin * size
            and resized_size(*reduced, size, MODE) == resized_size(width, height, size, MODE)
        ):
            return scale
    return 1


def fractional(data: bytes, width: int, height: int, scale: int, size: int) -> bytes:
    image = Image.open(io.BytesIO(data))
    image.draft("RGB", (width // scale, height // scale))
    reduced = np.asarray(image.convert("RGB"))[:, :, ::-1]
    target_w, target_h = resized_size(width, height, size, MODE)
    fx, fy = scale * target_w / width, scale * target_h / height
    resized = cv2.resize(reduced, None, fx=fx, fy=fy, interpolation=cv2.INTER_AREA)
    resized = resized[:target_h, :target_w]
    top, left = (target_h - size) // 2, (target_w - size) // 2
    crop = np.ascontiguousarray(resized[top : top + size, left : left + size])
    return cv2.imencode(".jpg", crop, [cv2.IMWRITE_JPEG_QUALITY, 95])[1].tobytes()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--image-size", type=int, default=224)
    args = parser.parse_args()
    size = args.image_size
    photos = []
    for path in sorted(glob.glob(os.path.join(photo_dir("realistic"), "*.jpg"))):
        with open(path, "rb") as handle:
            photos.append(handle.read())
    settings = FetchSettings(image_size=size, resize_mode=MODE)
    resize = _resizer(settings)
    todays = [process_image(data, settings).data for data in photos]
    rules = [
        ("today: full decode", lambda w, h: 1, False),
        ("decoded side > target", lambda w, h: any_scale(w, h, size, 1.0), False),
        ("decoded side >= 1.5 x target", lambda w, h: any_scale(w, h, size, 1.5), False),
        ("decoded side >= 2 x target", lambda w, h: any_scale(w, h, size, 2.0), False),
        ("jpeg_draft: divides, >= 2 x", lambda w, h: reduced_scale(w, h, size, MODE), False),
        ("fractional resize, >= 2 x", lambda w, h: any_scale(w, h, size, 2.0), True),
        ("fractional resize, >= 1.5 x", lambda w, h: any_scale(w, h, size, 1.5), True),
    ]
    print(f"{len(photos)} realistic photos, {size} px {MODE}, JPEG quality 95")
    print("| rule | photos reduced | worst PSNR | CPU ms per image |")
    print("|---|---:|---:|---:|")
    for name, choose, exact in rules:
        worst, reduced, seconds = float("inf"), 0, 0.0
        for data, today in zip(photos, todays):
            started = time.process_time()
            width, height = Image.open(io.BytesIO(data)).size
            scale = choose(width, height)
            if scale == 1:
                out = resize(io.BytesIO(data))[0]
            elif exact:
                out = fractional(data, width, height, scale, size)
            else:
                image = Image.open(io.BytesIO(data))
                image.draft("RGB", (width // scale, height // scale))
                image.load()
                stream = io.BytesIO()
                image.save(stream, "PPM")
                out = resize(stream)[0]
            seconds += time.process_time() - started
            if scale > 1:
                reduced += 1
                worst = min(worst, psnr(today, out))
        print(
            f"| {name} | {reduced / len(photos):.0%} | "
            f"{'' if not reduced else f'{worst:.1f} dB'} | {1000 * seconds / len(photos):.1f} |"
        )


if __name__ == "__main__":
    main()
