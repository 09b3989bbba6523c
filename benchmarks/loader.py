"""Trainer data loader throughput: ``trainer.loader.Loader`` against a plain
``webdataset`` pipeline doing the same work, side by side in one run.

    python benchmarks/loader.py                 # in-process, then one loader worker each
    python benchmarks/loader.py --quick         # fewer samples and repeats

Both sides read the same local shards (a synthetic build in the v1 shard
format: mmc4-like packed samples, ``seq_len`` 2048, 576 slots per image, one
to three 336 x 336 JPEGs a sample, cut from the bundled sample photographs)
and produce the same batch: int64 ``input_ids`` / ``segment_ids`` /
``positions``, VILA ``labels`` and ``position_ids``, images decoded, resized
to 224 x 224 (bicubic, shorter side then centre crop) and normalised with
CLIP's mean and std into ``[B, 3, 3, 224, 224]`` with a mask. The baseline is
the pipeline a user would write: ``wds.WebDataset(urls).shuffle(n)
.decode("pil").map(to_arrays).batched(B)`` with torchvision's ``Resize``,
``CenterCrop``, ``ToTensor`` and ``Normalize``.

Each side runs ``--repeats`` times, alternating; each run times ``--batches``
batches after a first, untimed one (start-up and the shuffle buffer's fill
are not throughput). Reported: packed samples/s and images/s per loader
worker (medians), and the ratio ours / baseline of the medians. The figures
go in docs/benchmarks.md ("Trainer data").
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import io
import json
import os
import statistics
import sys
import tarfile
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from PIL import Image  # noqa: E402

from trainer.batch import CLIP_MEAN, CLIP_STD  # noqa: E402
from trainer.features import vila_features  # noqa: E402
from trainer.loader import Loader, data_config  # noqa: E402

SEQ_LEN, TOKENS_PER_IMAGE, MAX_IMAGES, IMAGE_TOKEN, PAD = 2048, 576, 3, 32000, 0
SAMPLES_PER_SHARD = 64


def photographs(stored: int, count: int = 24) -> list[bytes]:
    """``count`` distinct ``stored``-pixel JPEGs (quality 95, as builds store
    them) cut from the bundled sample photographs."""
    paths = sorted(glob.glob(os.path.join(ROOT, "corpora", "data", "sample", "images", "*.jpg")))
    rng = np.random.default_rng(0)
    out = []
    for i in range(count):
        image = Image.open(paths[i % len(paths)]).convert("RGB")
        side = int(min(image.size) * rng.uniform(0.6, 1.0))
        left = int(rng.integers(0, image.width - side + 1))
        top = int(rng.integers(0, image.height - side + 1))
        crop = image.crop((left, top, left + side, top + side)).resize(
            (stored, stored), Image.BICUBIC
        )
        buffer = io.BytesIO()
        crop.save(buffer, "JPEG", quality=95)
        out.append(buffer.getvalue())
    return out


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def write_build(directory: str, samples: int, stored: int) -> dict:
    """A build of ``samples`` packed samples: shards and a manifest.json."""
    jpegs = photographs(stored)
    rng = np.random.default_rng(1)
    shards, images_total = [], 0
    for shard in range(-(-samples // SAMPLES_PER_SHARD)):
        name = f"bench-{shard:06d}.tar"
        path = os.path.join(directory, name)
        count = min(SAMPLES_PER_SHARD, samples - shard * SAMPLES_PER_SHARD)
        images_in_shard = 0
        with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
            for index in range(count):
                k = 1 + (shard * SAMPLES_PER_SHARD + index) % MAX_IMAGES
                text = int(rng.integers(50, SEQ_LEN - k * TOKENS_PER_IMAGE - 2))
                ids = (
                    [1]
                    + [IMAGE_TOKEN] * (k * TOKENS_PER_IMAGE)
                    + rng.integers(3, 32000, text).tolist()
                    + [2]
                )
                length = len(ids)
                input_ids = np.zeros(SEQ_LEN, np.int32)
                input_ids[:length] = ids
                segment_ids = np.zeros(SEQ_LEN, np.int32)
                segment_ids[:length] = 1
                positions = np.zeros(SEQ_LEN, np.int32)
                positions[:length] = np.arange(length)
                pictures = [jpegs[int(rng.integers(len(jpegs)))] for _ in range(k)]
                document = {
                    "id": f"doc-{shard}-{index}",
                    "segment": 1,
                    "images": [{"sha256": hashlib.sha256(p).hexdigest()} for p in pictures],
                }
                members = [
                    ("input_ids.npy", _npy(input_ids)),
                    ("segment_ids.npy", _npy(segment_ids)),
                    ("positions.npy", _npy(positions)),
                    *[(f"img{i:03d}.jpg", p) for i, p in enumerate(pictures)],
                    ("json", json.dumps({"documents": [document]}).encode()),
                ]
                key = f"bench-{shard:06d}-{index:06d}"
                for extension, data in members:
                    info = tarfile.TarInfo(f"{key}.{extension}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
                images_in_shard += k
        digest = hashlib.sha256(open(path, "rb").read()).hexdigest()
        shards.append({"path": name, "samples": count, "images": images_in_shard, "sha256": digest})
        images_total += images_in_shard
    manifest = {
        "format": "corpora-shards/1",
        "corpus": "bench",
        "seq_len": SEQ_LEN,
        "tokens_per_image": TOKENS_PER_IMAGE,
        "image_size": stored,
        "image_token_id": IMAGE_TOKEN,
        "pad_id": PAD,
        "vocab_size": 32000,
        "tokenizer": {"path": "synthetic", "sha256": "0" * 64},
        "max_images_per_sample": MAX_IMAGES,
        "shard_pattern": f"bench-{{000000..{len(shards) - 1:06d}}}.tar",
        "shards": shards,
        "totals": {"samples": samples, "images": images_total, "shards": len(shards)},
    }
    with open(os.path.join(directory, "manifest.json"), "w") as handle:
        json.dump(manifest, handle)
    return manifest


def ours(build: str, batch_size: int, size: int, shuffle: int, workers: int):
    config = data_config(
        [build],
        batch_size=batch_size,
        num_workers=workers,
        shuffle_buffer=shuffle,
        image_size=size,
        objective="vila",
        pin_memory=False,
    )
    return iter(Loader(config))


def baseline(build: str, batch_size: int, size: int, shuffle: int, workers: int):
    import torch
    import webdataset as wds
    from torchvision import transforms

    transform = transforms.Compose(
        [
            transforms.Resize(size, interpolation=transforms.InterpolationMode.BICUBIC),
            transforms.CenterCrop(size),
            transforms.ToTensor(),
            transforms.Normalize(CLIP_MEAN, CLIP_STD),
        ]
    )

    def to_arrays(sample):
        images = torch.zeros(MAX_IMAGES, 3, size, size)
        mask = torch.zeros(MAX_IMAGES, dtype=torch.bool)
        for slot in range(MAX_IMAGES):
            picture = sample.get(f"img{slot:03d}.jpg")
            if picture is not None:
                images[slot] = transform(picture)
                mask[slot] = True
        arrays = {
            k: sample[f"{k}.npy"].astype(np.int64)
            for k in ("input_ids", "segment_ids", "positions")
        }
        arrays.update(vila_features(arrays["input_ids"], arrays["segment_ids"], IMAGE_TOKEN))
        out = {k: torch.from_numpy(v) for k, v in arrays.items()}
        out.update(images=images, image_mask=mask)
        return out

    def collate(rows):
        return {k: torch.stack([row[k] for row in rows]) for k in rows[0] if not k.startswith("__")}

    with open(os.path.join(build, "manifest.json")) as handle:
        urls = [os.path.join(build, s["path"]) for s in json.load(handle)["shards"]]
    dataset = (
        wds.WebDataset(urls, resampled=True, shardshuffle=False)
        .shuffle(shuffle)
        .decode("pil")
        .map(to_arrays)
        .batched(batch_size, collation_fn=collate, partial=False)
    )
    if workers == 0:
        return iter(dataset)
    return iter(torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=workers))


def timed(make, batches: int) -> tuple[float, int, int]:
    """Seconds for ``batches`` batches after a first, untimed one; samples and images."""
    stream = make()
    next(stream)
    samples = images = 0
    start = time.perf_counter()
    for _ in range(batches):
        batch = next(stream)
        samples += int(batch["input_ids"].shape[0])
        images += int(batch["image_mask"].sum())
    seconds = time.perf_counter() - start
    del stream
    return seconds, samples, images


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--batches", type=int, default=24)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--stored", type=int, default=336, help="image size in the shards")
    parser.add_argument("--size", type=int, default=224, help="image size in the batch")
    parser.add_argument("--shuffle", type=int, default=64)
    parser.add_argument("--workers", type=int, nargs="*", default=[0, 1])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)  # as in a DataLoader worker; in-process torch ops would otherwise
    # spread over every core and measure the machine's contention, not the pipeline
    if args.quick:
        args.samples, args.batches, args.repeats = 192, 8, 3
    with tempfile.TemporaryDirectory() as build:
        manifest = write_build(build, args.samples, args.stored)
        print(
            f"# Loader throughput: {manifest['totals']['samples']} samples, "
            f"{manifest['totals']['images']} images ({args.stored} px JPEG) in "
            f"{len(manifest['shards'])} shards; batch {args.batch_size}, images to {args.size} px; "
            f"{args.batches} batches a run, median of {args.repeats}; "
            f"load average {os.getloadavg()[0]:.1f}"
        )
        print("| loader workers | side | samples/s | images/s | ratio ours / baseline |")
        print("|---|---|---|---|---|")
        for workers in args.workers:
            rates: dict[str, list[tuple[float, float]]] = {"baseline": [], "ours": []}
            for _ in range(args.repeats):
                for name, make in (("baseline", baseline), ("ours", ours)):
                    seconds, samples, images = timed(
                        lambda: make(build, args.batch_size, args.size, args.shuffle, workers),
                        args.batches,
                    )
                    rates[name].append((samples / seconds, images / seconds))
            base = statistics.median(r[0] for r in rates["baseline"])
            mine = statistics.median(r[0] for r in rates["ours"])
            for name in ("baseline", "ours"):
                samples_s = statistics.median(r[0] for r in rates[name])
                images_s = statistics.median(r[1] for r in rates[name])
                ratio = f"{mine / base:.2f}" if name == "ours" else ""
                label = f"{workers} (in-process)" if workers == 0 else str(workers)
                print(f"| {label} | {name} | {samples_s:.1f} | {images_s:.1f} | {ratio} |")
        print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
