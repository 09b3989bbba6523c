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
    pack_groups: int | None = None  # None: one group per pack.DOCS_PER_PACK_GROUP documents
    pack: bool = True  # False: one document (or piece of one) per sample
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
        if self.pack_groups is not None and self.pack_groups < 1:
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


def mmc4_pairs(
    inputs: tuple[str, ...], output: str, reassign: bool = False, **overrides: Any
) -> BuildSettings:
    """VILA's pseudo-interleaved MMC4 ablation: one (image, matched sentence) per record."""
    overrides.setdefault("corpus_options", {"reassign": bool(reassign)})
    return BuildSettings(corpus="mmc4-pairs", inputs=inputs, output=output, **overrides)


def coyo(
    inputs: tuple[str, ...],
    output: str,
    min_clip_sim: float | None = 0.6,
    max_nsfw: float | None = None,
    min_size: int = 0,
    max_aspect_ratio: float | None = None,
    top_fraction: float | None = None,
    **overrides: Any,
) -> BuildSettings:
    """COYO-700M as ``[image, alt-text]`` pairs. ``min_clip_sim`` 0.6 on
    ``clip_similarity_vitb32 + clip_similarity_vitl14`` is VILA's COYO-25M
    threshold; ``None`` keeps every row. ``top_fraction`` then keeps that
    fraction of the rows left, ranked by the same sum over the whole corpus
    (ties broken by id), before any download."""
    if top_fraction is not None and not 0 < top_fraction <= 1:
        raise ValueError(f"--top-fraction must be in (0, 1], got {top_fraction}")
    if min_clip_sim is not None and not 0 <= min_clip_sim <= 2:
        raise ValueError(
            f"--min-clip-sim is a sum of two cosine similarities, 0..2; got {min_clip_sim}"
        )
    if max_nsfw is not None and not 0 <= max_nsfw <= 1:
        raise ValueError(f"--max-nsfw is a probability, 0..1; got {max_nsfw}")
    if min_size < 0:
        raise ValueError(f"--min-size must be at least 0, got {min_size}")
    if max_aspect_ratio is not None and max_aspect_ratio < 1:
        raise ValueError(f"--max-aspect-ratio must be at least 1, got {max_aspect_ratio}")
    options = {
        "min_clip_sim": min_clip_sim or None,
        "max_nsfw": max_nsfw,
        "min_size": min_size,
        "max_aspect_ratio": max_aspect_ratio,
        "top_fraction": top_fraction,
    }
    return BuildSettings(
        corpus="coyo", inputs=inputs, output=output, corpus_options=options, **overrides
    )


def _mmc4_options(
    reassign: bool,
    min_sim: float | None,
    max_images: int | None,
    preset: str | None,
    keep_imageless: bool,
) -> dict[str, Any]:
    if min_sim is not None and not -1 <= min_sim <= 1:
        raise ValueError(f"--min-sim is a cosine similarity, -1..1; got {min_sim}")
    if max_images is not None and max_images < 0:
        raise ValueError(f"--max-images must be at least 0 (0: no limit), got {max_images}")
    if preset not in (None, "core"):
        raise ValueError(f"unknown --preset {preset!r}; one of: core")
    return {
        "reassign": bool(reassign),
        "min_sim": min_sim,
        "max_images": max_images or None,
        "preset": preset,
        "keep_imageless": bool(keep_imageless),
    }


def mmc4(
    inputs: tuple[str, ...],
    output: str,
    reassign: bool = False,
    min_sim: float | None = None,
    max_images: int | None = 6,
    preset: str | None = None,
    keep_imageless: bool = False,
    **overrides: Any,
) -> BuildSettings:
    """MMC4 interleaved: each image before its matched sentence (VILA,
    OpenFlamingo). ``max_images`` 6 is VILA's; ``min_sim`` keeps every image
    unless set (OpenFlamingo uses 0.24)."""
    options = _mmc4_options(reassign, min_sim, max_images, preset, keep_imageless)
    return BuildSettings(
        corpus="mmc4", inputs=inputs, output=output, corpus_options=options, **overrides
    )


def mmc4_reordered(
    inputs: tuple[str, ...],
    output: str,
    reassign: bool = False,
    min_sim: float | None = None,
    max_images: int | None = 6,
    preset: str | None = None,
    keep_imageless: bool = False,
    **overrides: Any,
) -> BuildSettings:
    """VILA's reordering ablation: the images and sentences of ``mmc4``, all images first."""
    options = _mmc4_options(reassign, min_sim, max_images, preset, keep_imageless)
    return BuildSettings(
        corpus="mmc4-reordered", inputs=inputs, output=output, corpus_options=options, **overrides
    )


def c4(inputs: tuple[str, ...], output: str, **overrides: Any) -> BuildSettings:
    """C4 text only (SimVLM's text corpus), one document per record."""
    return BuildSettings(corpus="c4", inputs=inputs, output=output, **overrides)


WIT_CAPTIONS = ("reference", "attribution", "alt", "best")


def wit(
    inputs: tuple[str, ...],
    output: str,
    caption: str = "reference",
    languages: tuple[str, ...] | None = None,
    with_context: bool = False,
    **overrides: Any,
) -> BuildSettings:
    """WIT as ``[image, caption]`` pairs; ``caption`` ``reference`` is the
    caption shown under the image on its page (WIT's main caption)."""
    if caption not in WIT_CAPTIONS:
        raise ValueError(f"unknown --caption {caption!r}; one of: {', '.join(WIT_CAPTIONS)}")
    if languages is not None:
        languages = tuple(sorted({code.strip() for code in languages if code.strip()}))
        if not languages:
            raise ValueError("--languages names no language")
    options = {
        "caption": caption,
        "languages": list(languages) if languages else None,
        "with_context": bool(with_context),
    }
    return BuildSettings(
        corpus="wit", inputs=inputs, output=output, corpus_options=options, **overrides
    )


def smoke(settings: BuildSettings) -> BuildSettings:
    """A laptop-sized variant of any build: short sequences, tiny images."""
    return settings.replace(
        seq_len=256,
        tokens_per_image=16,
        samples_per_shard=8,
        fetch=dataclasses.replace(settings.fetch, image_size=64),
    )


BUILDERS = {
    "mmc4-pairs": mmc4_pairs,
    "coyo": coyo,
    "mmc4": mmc4,
    "mmc4-reordered": mmc4_reordered,
    "c4": c4,
    "wit": wit,
}

# The corpus options each builder takes (the CLI refuses the others).
CORPUS_OPTIONS = {
    "mmc4-pairs": ("reassign",),
    "coyo": ("min_clip_sim", "max_nsfw", "min_size", "max_aspect_ratio", "top_fraction"),
    "mmc4": ("reassign", "min_sim", "max_images", "preset", "keep_imageless"),
    "mmc4-reordered": ("reassign", "min_sim", "max_images", "preset", "keep_imageless"),
    "c4": (),
    "wit": ("caption", "languages", "with_context"),
}
