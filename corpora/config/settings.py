"""Build settings: a frozen dataclass, built for a corpus by :func:`corpus_settings`.

The corpus's options come from its spec (:mod:`corpora.config.spec`); the CLI's flags
are mapped onto these settings by :func:`corpora.config.flags.settings_from_flags`.
Every field ends up in the manifest, so a build records everything that
shaped its output.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

from corpora import MAX_SEQ_LEN, stages
from corpora.clip import ClipSettings
from corpora.config import catalog
from corpora.config.bundled_sample import SAMPLE_TOKENIZER
from corpora.fetch import FetchSettings
from corpora.sources.inputs import MAX_LINE_BYTES
from corpora.store.settings import StoreSettings


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
    image_token_reserved: bool = False  # the image token id is a vocabulary piece set aside
    samples_per_shard: int = 1000
    pack_groups: int | None = None  # None: from the documents (pack_groups.pack_group_count)
    pack: bool = True  # False: one document (or piece of one) per sample
    fetch: FetchSettings = FetchSettings(image_size=336)
    corpus_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    clip: ClipSettings | None = None  # CLIP scoring and filtering (corpora.clip); off when None
    max_line_bytes: int = MAX_LINE_BYTES  # a longer input line is dropped as line_too_long
    store: StoreSettings = StoreSettings()  # the image store and img2dataset download, if any
    # The options of the build's stages (corpora.stages), by option name.
    stage_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 8 <= self.seq_len <= MAX_SEQ_LEN:
            raise ValueError(f"seq_len must be in 8..{MAX_SEQ_LEN}, got {self.seq_len}")
        if self.tokens_per_image < 1:
            raise ValueError(f"tokens_per_image must be at least 1, got {self.tokens_per_image}")
        if self.tokens_per_image + 2 > self.seq_len:
            raise ValueError(
                f"an image ({self.tokens_per_image} tokens) plus BOS/EOS must fit in "
                f"seq_len={self.seq_len}"
            )
        if self.samples_per_shard < 1:
            raise ValueError("samples_per_shard must be at least 1")
        if self.pack_groups is not None and self.pack_groups < 1:
            raise ValueError("pack_groups must be at least 1")
        if self.max_line_bytes < 1:
            raise ValueError(f"max_line_bytes must be at least 1, got {self.max_line_bytes}")

    def replace(self, **changes: Any) -> "BuildSettings":
        return dataclasses.replace(self, **changes)

    def derived(self) -> dict[str, Any]:
        """Quantities worth printing at start; a text corpus has no image ones.

        >>> corpus_settings("c4", ("c4.json.gz",), "out").derived()
        {'seq_len': 2048, 'tokens_per_shard': 2048000}
        """
        if not catalog.get(self.corpus).images:
            return {
                "seq_len": self.seq_len,
                "tokens_per_shard": self.seq_len * self.samples_per_shard,
            }
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
        # who asked is no part of what a build writes (the manifest's consent says it)
        settings["fetch"] = {
            k: v for k, v in settings["fetch"].items() if k not in ("user_agent", "contact")
        }
        if settings["fetch"]["max_aspect_ratio"] == float("inf"):
            settings["fetch"]["max_aspect_ratio"] = None
        settings["corpus_options"] = dict(self.corpus_options)
        settings["stage_options"] = dict(self.stage_options)
        return settings


DEFAULTS = BuildSettings(corpus="", inputs=(), output="")  # what a flag left out keeps


def corpus_settings(corpus: str, inputs: Sequence[str], output: str, **given: Any) -> BuildSettings:
    """The settings of a build of ``corpus``: its options by name (the others as
    its spec's defaults, see :mod:`corpora.config.catalog`) and any other field of
    :class:`BuildSettings`, and its stages' options by name
    (:mod:`corpora.stages`). A value the option refuses raises ``ValueError``.

    >>> built = corpus_settings("mmc4", ("docs.jsonl",), "out", max_images=0, seq_len=1024)
    >>> built.seq_len, built.corpus_options["max_images"], built.corpus_options["reassign"]
    (1024, None, False)
    >>> corpus_settings("c4", (), "out", min_sim=0.3)
    Traceback (most recent call last):
    ...
    ValueError: c4 has no option 'min_sim'
    """
    spec = catalog.get(corpus)
    overrides = {name: value for name, value in given.items() if name in _FIELDS}
    if "corpus_options" in overrides or "stage_options" in overrides:
        raise ValueError("give a corpus's or a stage's options by name, not as a mapping")
    staged = stages.options()
    options = spec.corpus_options(
        {k: v for k, v in given.items() if k not in _FIELDS and k not in staged}
    )
    return BuildSettings(
        corpus=corpus,
        inputs=tuple(inputs),
        output=output,
        corpus_options=options,
        stage_options=stages.stage_options({k: v for k, v in given.items() if k in staged}),
        **overrides,
    )


_FIELDS = frozenset(field.name for field in dataclasses.fields(BuildSettings))


def smoke(settings: BuildSettings) -> BuildSettings:
    """A laptop-sized variant of any build: short sequences, tiny images."""
    return settings.replace(
        seq_len=256,
        tokens_per_image=16,
        samples_per_shard=8,
        fetch=dataclasses.replace(settings.fetch, image_size=64),
    )
