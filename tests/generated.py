"""Generated inputs: MMC4-format corpora whose images come from the test
image server, and photographs of realistic size and weight."""

from __future__ import annotations

import glob
import io
import json
import os

WORDS = ("coffee", "rocket", "galaxy", "camera", "grass", "brick", "cat", "orbit", "table", "light")


def mmc4_documents(
    count: int,
    image_base: str,
    images_per_doc: int = 2,
    broken_every: int = 0,
    image_size: int = 48,
) -> list[dict]:
    """``count`` MMC4 documents with ``images_per_doc`` images each, served
    by ``image_base`` (the test image server); every ``broken_every``-th image
    URL answers 404, so the funnel has drops."""
    docs = []
    image = 0
    for number in range(count):
        sentences = [
            f"Document {number} sentence {s}: a {WORDS[(number + s) % len(WORDS)]} "
            f"near the {WORDS[(number * 3 + s) % len(WORDS)]}."
            for s in range(images_per_doc + 1)
        ]
        infos = []
        for index in range(images_per_doc):
            image += 1
            broken = broken_every and image % broken_every == 0
            path = (
                "/status/404"
                if broken
                else f"/img/{image_size}x{image_size}/doc{number}-{index}.jpg"
            )
            infos.append(
                {
                    "raw_url": image_base + path,
                    "image_name": f"doc{number}-{index}.jpg",
                    "matched_text_index": index + 1,
                    "matched_sim": 0.3,
                    "face_detections": None,
                }
            )
        docs.append(
            {
                "url": f"https://example.org/doc/{number}",
                "text_list": sentences,
                "image_info": infos,
                "similarity_matrix": None,
                "could_have_url_duplicate": 0,
            }
        )
    return docs


def write_mmc4(path: str, docs: list[dict]) -> str:
    with open(path, "w", encoding="utf-8") as handle:
        for doc in docs:
            handle.write(json.dumps(doc) + "\n")
    return path


SAMPLE_IMAGES = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    "corpora",
    "data",
    "sample",
    "images",
)


def realistic_photo(index: int, long_side: int | None = None) -> bytes:
    """A JPEG the size and weight of a web photograph: 500-2,000 px on the
    long side, 100-400 KB.

    One of the bundled sample photographs (384 px), scaled up with Lanczos to
    a long side drawn from ``index`` (or ``long_side``), with grain at two
    scales added so the JPEG carries the detail, and the bytes, of a real
    photo rather than a smooth thumbnail. The quality steps down from 95 while
    the file is over 400 KB and the grain grows while it is under 100 KB.
    Deterministic: the same ``index`` gives the same bytes.
    """
    import numpy as np
    from PIL import Image

    paths = sorted(glob.glob(os.path.join(SAMPLE_IMAGES, "*.jpg")))
    rng = np.random.default_rng(index)
    if long_side is None:
        long_side = int(rng.integers(500, 2001))
    with Image.open(paths[index % len(paths)]) as source:
        image = source.convert("RGB")
    scale = long_side / max(image.size)
    size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
    pixels = np.asarray(image.resize(size, Image.LANCZOS), np.float32)
    height, width = pixels.shape[:2]
    for sigma in (4.0, 6.0, 9.0, 14.0, 20.0, 28.0):
        coarse = rng.normal(0, sigma, (height // 4 + 1, width // 4 + 1, 1)).astype(np.float32)
        grain = np.repeat(np.repeat(coarse, 4, 0), 4, 1)[:height, :width]
        grain = grain + rng.normal(0, sigma, pixels.shape).astype(np.float32)
        noisy = Image.fromarray(np.clip(pixels + grain, 0, 255).astype(np.uint8))
        for quality in range(95, 40, -5):
            buffer = io.BytesIO()
            noisy.save(buffer, "JPEG", quality=quality)
            if buffer.tell() <= 400_000:
                break
        if buffer.tell() >= 100_000:
            break
    return buffer.getvalue()
