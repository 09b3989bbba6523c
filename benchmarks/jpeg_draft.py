"""Reduced-size JPEG decode: rules for taking a DCT scale, against the full decode.

    python benchmarks/jpeg_draft.py                    # 224 px center crop, the realistic photos
    python benchmarks/jpeg_draft.py --image-size 336

For each margin (the side the resize scales must stay at least ``margin``
times the target after the reduction; ``corpora.fetch.jpeg_draft.MARGIN`` is the
one the fetch uses): the share of photos it decodes reduced, the worst PSNR
of the final JPEG against the full decode's (``process_image(...,
reduced_decode=False)``, byte for byte img2dataset's) and the CPU ms per
image of ``corpora.fetch.image``'s decode + resize + encode in one thread.
The photos are ``benchmarks/e2e.py``'s realistic ones (500-2,000 px,
100-400 KB).
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
from corpora.fetch import FetchSettings, process_image  # noqa: E402
from corpora.fetch.image import resize_for  # noqa: E402
from corpora.fetch.jpeg_draft import MARGIN, reduced_read_flag, reduced_scale  # noqa: E402

MODE = "center_crop"


def psnr(a: bytes, b: bytes) -> float:
    x = cv2.imdecode(np.frombuffer(a, np.uint8), cv2.IMREAD_COLOR).astype(np.float64)
    y = cv2.imdecode(np.frombuffer(b, np.uint8), cv2.IMREAD_COLOR).astype(np.float64)
    mse = float(((x - y) ** 2).mean())
    return float("inf") if mse == 0 else 10 * np.log10(255**2 / mse)


def decode_resize_encode(data: bytes, settings: FetchSettings, margin: float | None) -> tuple:
    """The fetch's plain-JPEG path with the reduction rule at ``margin``
    (``None``: full decode)."""
    width, height = Image.open(io.BytesIO(data)).size
    scale = 1 if margin is None else reduced_scale(width, height, settings.image_size, MODE, margin)
    if scale == 1:
        return process_image(data, settings, reduced_decode=False).data, 1
    pixels = cv2.imdecode(np.frombuffer(data, np.uint8), reduced_read_flag(scale, grey=False))
    return resize_for(settings)(pixels, scale, width, height)[0], scale


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--image-size", type=int, default=224)
    args = parser.parse_args()
    photos = []
    for path in sorted(glob.glob(os.path.join(photo_dir("realistic"), "*.jpg"))):
        with open(path, "rb") as handle:
            photos.append(handle.read())
    settings = FetchSettings(image_size=args.image_size, resize_mode=MODE)
    fulls = [decode_resize_encode(data, settings, None)[0] for data in photos]
    print(f"{len(photos)} realistic photos, {args.image_size} px {MODE}, JPEG quality 95")
    print("| rule | photos reduced | worst PSNR | CPU ms per image |")
    print("|---|---:|---:|---:|")
    for margin in (None, 1.0, 1.5, MARGIN):
        worst, reduced, seconds = float("inf"), 0, 0.0
        for data, full in zip(photos, fulls):
            started = time.process_time()
            out, scale = decode_resize_encode(data, settings, margin)
            seconds += time.process_time() - started
            if scale > 1:
                reduced += 1
                worst = min(worst, psnr(full, out))
        name = "full decode" if margin is None else f"side at least {margin:g} x target"
        name += " (the fetch's rule)" if margin == MARGIN else ""
        print(
            f"| {name} | {reduced / len(photos):.0%} | "
            f"{'' if not reduced else f'{worst:.1f} dB'} | {1000 * seconds / len(photos):.1f} |"
        )


if __name__ == "__main__":
    main()
