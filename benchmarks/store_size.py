"""Image-store size: measured bytes per stored image on real photographs.

    python benchmarks/store_size.py                       # the bundled sample photos
    python benchmarks/store_size.py --photos DIR --quality 75 90

What it measures. Every photograph in ``--photos`` (JPEG or PNG) is cropped
to the aspect of each COYO-700M row in ``tests/data/upstream`` and resized to
that row's width x height (the sizes COYO records for the originals: 600 x
447 … 2000 x 1309), then encoded as a web server would serve it (baseline
JPEG at each ``--quality``). Those bodies are written through a real
:class:`corpora.store.ImageStore`: one holding originals, one holding
images resized to ``--resized`` px (``StoreSpec(image_size=…)``). It prints,
per image, the stored image bytes and the bytes on disk (tars with their
headers and ``.json`` members, parquets, markers), and what COYO-25M and
mmc4-core (30.5M images, allenai/mmc4's README) would take at that rate.
The shards themselves (images at ``--image-size``) are shown for scale.

``--memory N`` measures instead the writer's peak RSS (a fresh process each)
writing N and 10 N copies of a sample photo into one split: the writer
streams bodies to disk, so the two peaks should match.
"""

from __future__ import annotations

import argparse
import glob
import io
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from corpora.fetch import FetchSettings, process_image  # noqa: E402
from corpora.store import ImageStore, StoreSpec  # noqa: E402

COYO_ROWS = os.path.join(ROOT, "tests", "data", "upstream", "coyo700m_readme_preview.jsonl")
SAMPLE_PHOTOS = os.path.join(ROOT, "corpora", "data", "sample", "images")
CORPORA = {"COYO-25M": 25_000_000, "mmc4-core": 30_500_000}


def coyo_sizes() -> list[tuple[int, int]]:
    with open(COYO_ROWS, encoding="utf-8") as handle:
        return [(row["width"], row["height"]) for row in map(json.loads, handle)]


def served(photo, width: int, height: int, quality: int) -> bytes:
    """The photo cropped to ``width:height`` around its centre, resized, as a JPEG."""
    from PIL import Image

    scale = max(width / photo.width, height / photo.height)
    crop_w, crop_h = round(width / scale), round(height / scale)
    left, top = (photo.width - crop_w) // 2, (photo.height - crop_h) // 2
    image = photo.crop((left, top, left + crop_w, top + crop_h))
    image = image.resize((width, height), Image.LANCZOS)
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=quality)
    return buffer.getvalue()


def disk_bytes(root: str) -> int:
    return sum(
        os.path.getsize(os.path.join(folder, name))
        for folder, _, names in os.walk(root)
        for name in names
    )


def measure(bodies: list[bytes], spec: StoreSpec) -> tuple[float, float]:
    """(mean stored image bytes, mean bytes on disk) per image."""
    with tempfile.TemporaryDirectory() as root:
        store = ImageStore.open(root, spec)
        with store.writer("measure.jsonl") as writer:
            for i, body in enumerate(bodies):
                writer.add(f"https://photos.example/{i}.jpg", body)
        store.mark_complete("measure.jsonl")
        stored = store.stored_bytes("measure.jsonl")
        return stored / len(bodies), disk_bytes(root) / len(bodies)


_PEAK = """
import os, resource, sys, tempfile
sys.path.insert(0, sys.argv[1])
from corpora.store import ImageStore
with open(sys.argv[3], "rb") as handle:
    body = handle.read()
with tempfile.TemporaryDirectory() as root:
    store = ImageStore.open(root)
    with store.writer("memory.jsonl") as writer:
        for i in range(int(sys.argv[2])):
            writer.add(f"https://photos.example/{i}.jpg", body)
    stored = store.stored_bytes("memory.jsonl")
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, stored / 1e6)
"""


def peak_memory(count: int) -> None:
    photo = os.path.join(SAMPLE_PHOTOS, "astronaut.jpg")
    for n in (count, 10 * count):
        done = subprocess.run(
            [sys.executable, "-c", _PEAK, ROOT, str(n), photo],
            capture_output=True,
            text=True,
            check=True,
        )
        peak, stored = map(float, done.stdout.split())
        print(f"{n:>8} images, {stored:8.1f} MB stored: writer peak RSS {peak:6.1f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--photos", default=SAMPLE_PHOTOS, help="a folder of photographs")
    parser.add_argument("--quality", type=int, nargs="+", default=[75, 90])
    parser.add_argument("--resized", type=int, default=512)
    parser.add_argument("--image-size", type=int, default=336)
    parser.add_argument("--memory", type=int, metavar="N", help="measure peak RSS instead")
    args = parser.parse_args()
    if args.memory:
        peak_memory(args.memory)
        return
    from PIL import Image

    paths = sorted(
        p
        for p in glob.glob(os.path.join(args.photos, "*"))
        if p.lower().endswith((".jpg", ".jpeg", ".png"))
    )  # noqa: E501
    photos = [Image.open(p).convert("RGB") for p in paths]
    sizes = coyo_sizes()
    pixels = sum(w * h for w, h in sizes) / len(sizes)
    print(
        f"{len(photos)} photos from {args.photos} ({', '.join(os.path.basename(p) for p in paths)})"
    )  # noqa: E501
    print(f"{len(sizes)} COYO sizes, mean {pixels / 1e6:.2f} Mpixel: {sizes}\n")
    shard = FetchSettings(image_size=args.image_size)
    header = f"{'quality':>7} {'store':<18} {'image B':>9} {'on disk B':>10} {'bits/px':>7}"
    print(header + "".join(f" {name:>10}" for name in CORPORA))
    for quality in args.quality:
        bodies = [served(photo, w, h, quality) for photo in photos for w, h in sizes]
        rows = [
            ("originals", *measure(bodies, StoreSpec())),
            (f"resized {args.resized}", *measure(bodies, StoreSpec(args.resized))),
        ]
        shard_bytes = sum(len(process_image(b, shard).data or b"") for b in bodies) / len(bodies)
        rows.append((f"shards {args.image_size} px", shard_bytes, shard_bytes))
        for name, image, disk in rows:
            line = f"{quality:>7} {name:<18} {image:>9.0f} {disk:>10.0f} {image * 8 / pixels:>7.2f}"
            print(line + "".join(f" {disk * n / 1e12:>8.2f}TB" for n in CORPORA.values()))


if __name__ == "__main__":
    main()
