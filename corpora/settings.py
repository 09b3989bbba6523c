"""Build settings: frozen dataclasses built by one function per corpus.

The CLI maps flags onto these; it holds no logic. Every field ends up in the
manifest, so a build records everything that shaped its output.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Mapping

from corpora.clip import ClipSettings
from corpora.fetch import FetchSettings

PACKAGE_DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
SAMPLE_TOKENIZER = os.path.join(PACKAGE_DATA, "sample.model")


@dataclasses.dataclass(frozen=True)
class BuildSettings:
    corpus: str
    inputs: tuple[str, ...]
    output: str
    tokenizer: str = SAMPLE_TOKENIZER
    seq_len: int = 2048
    tokens_per_image: int = 576  # VILA: CLIP ViT-L/14 at 336 px gives 24 x 24 patches
    image_token_id: int | None = None
    pad_id: int | None = None
    samples_per_shard: int = 1000
    pack_groups: int = 1
    fetch: FetchSettings = FetchSettings(image_size=336)
    corpus_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    clip: ClipSettings | None = None  # CLIP scoring and filtering (corpora.clip); off when None

    def __post_init__(self) -> None:
        if self.seq_len < 8:
            raise ValueError(f"seq_len must be at least 8, got {self.seq_len}")
        if self.tokens_per_image < 1:
            raise ValueError(f"tokens_per_image must be at least 1, got {self.tokens_per_image}")
        if self.tokens_per_image + 2 > self.seq_len:
            raise ValueError(
                f"an image ({self.tokens_per_image} tokens) plus BOS/EOS must fit in seq_len={self.seq_len}"
            )
        if self.samples_per_shard < 1:
            raise ValueError("samples_per_shard must be at least 1")
        if self.pack_groups < 1:
            raise ValueError("pack_groups must be at least 1")

    def replace(self, **changes: Any) -> "BuildSettings":
        return dataclasses.replace(self, **changes)

    def derived(self) -> dict[str, Any]:
        """Quantities worth printing at start."""
        return {
            "seq_len": self.seq_len,
            "tokens_per_image": self.tokens_per_image,
            "max_images_per_sequence": self.seq_len // (self.tokens_per_image + 2),
            "tokens_per_shard": self.seq_len * self.samples_per_shard,
            "image_size": self.fetch.image_size,
        }

    def as_manifest(self) -> dict[str, Any]:
        settings = dataclasses.asdict(self)
        settings["inputs"] = list(self.inputs)
        settings["fetch"] = {k: v for k, v in settings["fetch"].items() if k != "user_agent"}
        if settings["fetch"]["max_aspect_ratio"] == float("inf"):
            settings["fetch"]["max_aspect_ratio"] = None
        settings["corpus_options"] = dict(self.corpus_options)
        return settings


def mmc4_pairs(inputs: tuple[str, ...], output: str, **overrides: Any) -> BuildSettings:
    """VILA's pseudo-interleaved MMC4 ablation: one (image, matched sentence) per record."""
    return BuildSettings(corpus="mmc4-pairs", inputs=inputs, output=output, **overrides)


def smoke(settings: BuildSettings) -> BuildSettings:
    """A laptop-sized variant of any build: short sequences, tiny images."""
    return settings.replace(
        seq_len=256, tokens_per_image=16, samples_per_shard=8,
        fetch=dataclasses.replace(settings.fetch, image_size=64),
    )


BUILDERS = {"mmc4-pairs": mmc4_pairs}
