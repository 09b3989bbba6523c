"""CLIP stage throughput: our Beam stage against a plain batched open_clip loop.

Both sides start from the same JPEG bytes (the fetch stage's output) and do
the same work per pair: decode, open_clip preprocessing, image and text
encoding in batches of ``--batch-size``, cosine similarity. Both include
loading the model. Ours runs ``records | ClipStage`` on the
DirectRunner (one in-process worker: RunInference, scoring, score histogram,
manifest summary); the baseline is a for-loop over batches. Weights are
random (no download); throughput does not depend on their values.

    python benchmarks/clip.py                          # CPU, ViT-B-32, 96 pairs
    python benchmarks/clip.py --device cuda --images 4096 --batch-size 256 --model ViT-L-14

On CUDA both sides run under float16 autocast. Each side runs ``--repeats``
times, alternating; the ratio ours/baseline is reported for the medians and
for the best runs (the better guide on a machine shared with other jobs).
"""

from __future__ import annotations

import argparse
import glob
import io
import json
import os
import pickle
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")

from PIL import Image  # noqa: E402

from corpora.config.bundled_sample import PACKAGE_DATA  # noqa: E402
from corpora.record import Document, ImageChunk, TextChunk  # noqa: E402

CAPTIONS = [
    "an astronaut in a white suit",
    "a brick wall in the sun",
    "an old film camera on a table",
    "a cat sleeping on a windowsill",
    "a cup of coffee",
    "green grass after rain",
    "galaxies in the deep field",
    "a rocket lifting off at dawn",
]


def make_records(count: int, image_size: int) -> list[Document]:
    """``count`` pairs: crops of the bundled photographs, re-encoded as the fetch stage does."""
    sources = []
    for path in sorted(glob.glob(os.path.join(PACKAGE_DATA, "sample", "images", "*.jpg"))):
        with Image.open(path) as image:
            sources.append(image.convert("RGB"))
    records = []
    for i in range(count):
        source = sources[i % len(sources)]
        shift = (i // len(sources)) % 16
        box = (shift, shift, source.width - 16 + shift, source.height - 16 + shift)
        buffer = io.BytesIO()
        source.crop(box).resize((image_size, image_size)).save(buffer, "JPEG", quality=95)
        records.append(
            Document(
                id=f"bench-{i:06d}",
                corpus="bench",
                chunks=(
                    ImageChunk(
                        url=f"http://bench.test/{i}.jpg",
                        data=buffer.getvalue(),
                        width=image_size,
                        height=image_size,
                        sha256="0" * 64,
                    ),
                    TextChunk(f"{CAPTIONS[i % len(CAPTIONS)]}, number {i}"),
                ),
            )
        )
    return records


def baseline(records: list[Document], model_name: str, batch_size: int, device: str) -> float:
    """A plain batched open_clip loop; returns wall seconds."""
    import open_clip
    import torch

    start = time.perf_counter()
    model, _, preprocess = open_clip.create_model_and_transforms(model_name)
    model = model.to(device).eval()
    tokenizer = open_clip.get_tokenizer(model_name)
    scores = []
    with (
        torch.inference_mode(),
        torch.autocast("cuda", dtype=torch.float16, enabled=device == "cuda"),
    ):
        for begin in range(0, len(records), batch_size):
            batch = records[begin : begin + batch_size]
            images = torch.stack(
                [preprocess(Image.open(io.BytesIO(r.images[0].data)).convert("RGB")) for r in batch]
            ).to(device)
            texts = tokenizer([r.texts[0].text for r in batch]).to(device)
            image_features = torch.nn.functional.normalize(
                model.encode_image(images).float(), dim=-1
            )
            text_features = torch.nn.functional.normalize(model.encode_text(texts).float(), dim=-1)
            scores.extend((image_features * text_features).sum(-1).cpu().tolist())
    assert len(scores) == len(records)
    return time.perf_counter() - start


def ours(records: list[Document], model_name: str, batch_size: int, device: str) -> float:
    """Our CLIP stage in a Beam pipeline on the DirectRunner; returns wall seconds."""
    import apache_beam as beam

    from corpora.clip import ClipSettings
    from pipelines.clip import ClipStage
    from pipelines.runners import make_runner, pipeline_options

    settings = ClipSettings(model=model_name, pretrained=None, batch_size=batch_size, device=device)
    output = tempfile.mkdtemp(prefix="bench-clip-")
    # The records reach the stage from a file, as they reach it from the fetch stage in a build:
    # beam.Create would instead pickle and bz2-compress all the JPEG bytes into the pipeline
    # itself, a cost of this harness that no build pays.
    source = os.path.join(output, "records.pickle")
    with open(source, "wb") as handle:
        pickle.dump(records, handle)
    options = pipeline_options("DirectRunner", 1)
    start = time.perf_counter()
    with beam.Pipeline(runner=make_runner(options), options=options) as pipeline:
        stage = (
            pipeline
            | beam.Create([source])
            | beam.FlatMap(lambda path: pickle.load(open(path, "rb")))
            | ClipStage(settings, output)
        )
        _ = (
            stage.docs
            | beam.combiners.Count.Globally()
            | beam.Map(
                lambda n, expected: (
                    None if n == expected else sys.exit(f"scored {n} of {expected}")
                ),
                len(records),
            )
        )
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model", default="ViT-B-32", help="open_clip architecture (random weights)"
    )
    parser.add_argument("--images", type=int, default=96)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--image-size", type=int, default=256, help="side of the fetched JPEGs")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    args = parser.parse_args()

    import logging

    import torch

    logging.getLogger().setLevel(logging.ERROR)  # open_clip warns about random weights
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda: torch sees no CUDA GPU")
    records = make_records(args.images, args.image_size)
    # warm both sides alike: imports (open_clip; Beam's runner and RunInference) and caches
    baseline(records[: args.batch_size], args.model, args.batch_size, args.device)
    ours(records[: args.batch_size], args.model, args.batch_size, args.device)
    times: dict[str, list[float]] = {"baseline": [], "ours": []}
    for _ in range(args.repeats):
        times["baseline"].append(baseline(records, args.model, args.batch_size, args.device))
        times["ours"].append(ours(records, args.model, args.batch_size, args.device))
    rates = {side: args.images / statistics.median(seconds) for side, seconds in times.items()}
    ratio = rates["ours"] / rates["baseline"]
    device = (
        torch.cuda.get_device_name()
        if args.device == "cuda"
        else f"cpu ({torch.get_num_threads()} threads)"
    )
    print(f"CLIP {args.model}, {args.images} image-text pairs, batch {args.batch_size}, {device}")
    for side in ("baseline", "ours"):
        print(
            f"  {side:<8} {rates[side]:8.2f} images/s"
            f"  (runs: {', '.join(f'{t:.1f}s' for t in times[side])})"
        )
    best = {side: args.images / min(seconds) for side, seconds in times.items()}
    print(
        f"  ratio ours/baseline: {ratio:.3f} (medians);"
        f" {best['ours'] / best['baseline']:.3f} (best runs)"
    )
    print(
        f"  ours: {1e6 / rates['ours'] / 3600:.1f} hours per million images (image + text)"
        " on this machine"
    )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(
                {
                    "args": vars(args),
                    "device": device,
                    "seconds": times,
                    "images_per_s": rates,
                    "ratio": ratio,
                    "ratio_best": best["ours"] / best["baseline"],
                },
                handle,
                indent=2,
            )


if __name__ == "__main__":
    main()
