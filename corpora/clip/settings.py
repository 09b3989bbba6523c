"""What shapes the CLIP stage: the model, its weights, batching, and the
selection applied to the scores (all of it goes into the manifest)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from typing import Any

SCORE = "clip_sim"  # key of the computed score in ImageChunk.scores
SCORE_DECIMALS = 6  # scores are stored rounded, well inside float32 precision
DEVICES = ("auto", "cpu", "cuda")
CHECKPOINT_SUFFIXES = (".pt", ".pth", ".bin", ".safetensors", ".ckpt")


class ClipModelError(ValueError):
    """A CLIP model cannot be loaded; the message is one line for the user."""


@dataclasses.dataclass(frozen=True)
class ClipSettings:
    """What shapes the CLIP stage (all of it goes into the manifest).

    ``model_config`` holds the JSON text of a config file given as ``model``
    (so a worker process can register the architecture without the file).
    """

    model: str
    pretrained: str | None = None
    model_config: str | None = None
    batch_size: int = 32
    device: str = "auto"
    min_sim: float | None = None
    top_fraction: float | None = None
    save_embeddings: bool = False
    checkpoint_sha256: str | None = None

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"CLIP batch size must be at least 1, got {self.batch_size}")
        if self.device not in DEVICES:
            raise ValueError(
                f"CLIP device must be one of {', '.join(DEVICES)}, got {self.device!r}"
            )
        if self.top_fraction is not None and not 0.0 < self.top_fraction <= 1.0:
            raise ValueError(f"--clip-top-fraction must be in (0, 1], got {self.top_fraction}")
        if self.min_sim is not None and not -1.0 <= self.min_sim <= 1.0:
            raise ValueError(
                f"--min-clip-sim is a cosine similarity in [-1, 1], got {self.min_sim}"
            )

    @property
    def model_id(self) -> str:
        """The name written next to every score: ``ViT-L-14/openai``, ``tiny/tiny.pt``."""
        if self.pretrained is None:
            return f"{self.model}/random-init"
        if is_checkpoint_path(self.pretrained):
            return f"{self.model}/{os.path.basename(self.pretrained)}"
        return f"{self.model}/{self.pretrained}"


def is_checkpoint_path(pretrained: str) -> bool:
    """A local file rather than an open_clip tag (tags hold no path separator)."""
    return (
        os.sep in pretrained
        or "/" in pretrained
        or os.path.isfile(pretrained)
        or pretrained.endswith(CHECKPOINT_SUFFIXES)
    )


def clip_settings(model: str, pretrained: str | None, **options: Any) -> ClipSettings:
    """Settings for ``--clip-model MODEL --clip-pretrained PRETRAINED``.

    Reads a model config given as a path, and fingerprints a local checkpoint
    (sha256) so that the manifest says exactly which weights scored the build.
    """
    model_config = None
    if model.endswith(".json") or os.path.isfile(model):
        try:
            with open(model, encoding="utf-8") as handle:
                text = handle.read()
            config = json.loads(text)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ClipModelError(
                f"cannot read CLIP model config {model}: {one_line(exc)}"
            ) from None
        if not isinstance(config, dict) or not {"embed_dim", "vision_cfg", "text_cfg"} <= set(
            config
        ):
            raise ClipModelError(
                f"CLIP model config {model} is not an open_clip config "
                "(needs embed_dim, vision_cfg, text_cfg)"
            )
        model_config = json.dumps(config, sort_keys=True)
        model = os.path.splitext(os.path.basename(model))[0]
    checkpoint_sha256 = None
    if pretrained is not None and is_checkpoint_path(pretrained):
        pretrained = os.path.abspath(pretrained)
        checkpoint_sha256 = _checkpoint_sha256(pretrained)
    try:
        return ClipSettings(
            model=model,
            pretrained=pretrained,
            model_config=model_config,
            checkpoint_sha256=checkpoint_sha256,
            **options,
        )
    except ValueError as exc:
        raise ClipModelError(str(exc)) from None


def _checkpoint_sha256(path: str) -> str:
    if not os.path.exists(path):
        raise ClipModelError(f"CLIP checkpoint not found: {path}")
    try:
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        return digest.hexdigest()
    except OSError as exc:
        raise ClipModelError(f"CLIP checkpoint is not readable: {path} ({one_line(exc)})") from None


def one_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__
