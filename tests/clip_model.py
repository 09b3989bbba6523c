"""A tiny open_clip architecture with random weights, made here (nothing is downloaded).

Test modules import the fixtures they use from here.
"""

from __future__ import annotations

import dataclasses
import glob
import io
import json
import os
import pathlib

import numpy as np
import pytest

from corpora.config.bundled_sample import PACKAGE_DATA
from corpora.record import Document, ImageChunk, TextChunk

TINY_NAME = "corpora-tiny-clip"
TINY_CONFIG = {
    "embed_dim": 32,
    "vision_cfg": {"image_size": 32, "layers": 2, "width": 64, "patch_size": 8, "head_width": 32},
    "text_cfg": {"context_length": 16, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 2},
}
SAMPLE_IMAGES = sorted(glob.glob(os.path.join(PACKAGE_DATA, "sample", "images", "*.jpg")))
CAPTIONS = [
    "an astronaut in a white suit",
    "a brick wall",
    "an old camera",
    "a cat on a windowsill",
    "a cup of coffee",
    "green grass",
    "galaxies in the deep field",
    "a rocket lifting off",
]


@dataclasses.dataclass(frozen=True)
class TinyClip:
    config_path: str  # an open_clip config file; its stem is the architecture name
    checkpoint: str  # random weights of that architecture
    mismatched: str  # weights of another width: does not fit
    name: str = TINY_NAME


def _save_random_weights(config: dict, name: str, path: str, seed: int) -> None:
    import open_clip
    import torch

    torch.manual_seed(seed)
    model = open_clip.model.CLIP(**config)
    torch.save(model.state_dict(), path)
    del open_clip  # keep the registry untouched: the config is registered through corpora.clip


@pytest.fixture(scope="session")
def tiny_clip(tmp_path_factory) -> TinyClip:
    return make_tiny_clip(tmp_path_factory.mktemp("clip"))


def make_tiny_clip(directory) -> TinyClip:
    """The tiny model's config and weights (seeded: the same bytes every time) in ``directory``."""
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    config_path = directory / f"{TINY_NAME}.json"
    config_path.write_text(json.dumps(TINY_CONFIG))
    checkpoint = str(directory / "tiny.pt")
    _save_random_weights(TINY_CONFIG, TINY_NAME, checkpoint, seed=0)
    wider = json.loads(json.dumps(TINY_CONFIG))
    wider["vision_cfg"]["width"] = 96
    mismatched = str(directory / "wider.pt")
    _save_random_weights(wider, "wider", mismatched, seed=1)
    return TinyClip(str(config_path), checkpoint, mismatched)


def jpeg(path: str, size: int = 48) -> bytes:
    """A sample photograph re-encoded small, as the fetch stage would hand it on."""
    from PIL import Image

    with Image.open(path) as image:
        image = image.convert("RGB").resize((size, size))
        buffer = io.BytesIO()
        image.save(buffer, "JPEG", quality=90)
        return buffer.getvalue()


def pair(record_id: str, data: bytes | None, text: str) -> Document:
    return Document(
        id=record_id,
        corpus="mmc4-pairs",
        chunks=(
            ImageChunk(
                url=f"http://images.test/{record_id}.jpg",
                data=data,
                width=48,
                height=48,
                sha256="0" * 64,
            ),
            TextChunk(text),
        ),
        source_url=f"http://pages.test/{record_id}",
    )


def sample_pairs() -> list[Document]:
    return [pair(f"p{i}", jpeg(path), CAPTIONS[i]) for i, path in enumerate(SAMPLE_IMAGES)]


def direct_scores(tiny: TinyClip, images: list[bytes], texts: list[str]) -> np.ndarray:
    """Cosine similarities computed with open_clip alone, one pair at a time."""
    import open_clip
    import torch
    from PIL import Image

    open_clip.add_model_config(tiny.config_path)
    model, _, preprocess = open_clip.create_model_and_transforms(TINY_NAME)
    open_clip.load_checkpoint(model, tiny.checkpoint)
    model.eval()
    tokenizer = open_clip.get_tokenizer(TINY_NAME)
    scores = []
    with torch.no_grad():
        for data, text in zip(images, texts):
            image = preprocess(Image.open(io.BytesIO(data)).convert("RGB")).unsqueeze(0)
            image_features = model.encode_image(image)
            text_features = model.encode_text(tokenizer([text]))
            scores.append(
                torch.nn.functional.cosine_similarity(image_features, text_features).item()
            )
    return np.asarray(scores)
