"""The ordered list of a build's stages (:class:`corpora.stages.stage.Stage`).

``corpora build`` runs every stage of :data:`STAGES` that applies to the
corpus and settings (:func:`active`), in this order; ``corpora fetch`` runs
the same list up to and including ``fetch`` (:func:`through`). The flags of
both commands, the manifest's ``stages`` and docs/architecture.md all read
this list. A stage for every corpus (a filter, dedup, CLIP) is an entry
here; a corpus's own stages come from its spec (``spec_core``).

Stages from outside the package: ``CORPORA_STAGES`` names importable modules
(comma-separated) whose ``STAGES`` tuple holds stages with ``after`` set; each
runs right after the stage it names. The workers of a build must be able to
import them too.

>>> [stage.name for stage in STAGES]  # doctest: +NORMALIZE_WHITESPACE
['read', 'filter', 'spread', 'select', 'decontaminate_text', 'exclude_seen', 'dedup_text',
 'duplicate_image_urls', 'fetch', 'exclude_seen_images', 'duplicate_images',
 'near_duplicate_images', 'clip', 'clip_near_duplicates', 'layout', 'dedup_index', 'pack']
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from corpora.config.spec import Option
from corpora.dedup.embeddings import NEAR_DUP_CLIP_SIM_OPTION, check_clip, clip_sim
from corpora.dedup.images import (
    DUPLICATE_IMAGE,
    IMAGE_REPEATED,
    NEAR_DUPLICATE_IMAGE,
    image_dedup,
)
from corpora.dedup.images import OPTIONS as IMAGE_DEDUP_OPTIONS
from corpora.dedup.index import EXCLUDE_SEEN, SEEN_IN_BLEND, seen_builds
from corpora.dedup.sources import DECONTAMINATE, EVAL_CONTAMINATION, text_paths
from corpora.dedup.text import DEDUP_TEXT, DUPLICATE_TEXT, NEAR_DUPLICATE_TEXT
from corpora.stages.stage import Stage, StageError

if TYPE_CHECKING:
    from corpora.config.settings import BuildSettings
    from corpora.config.spec import CorpusSpec

STAGES_ENV = "CORPORA_STAGES"
FETCH = "fetch"  # the last stage of ``corpora fetch``

STAGES = (
    Stage(
        "read",
        "read the input files into records (the corpus's reader; a text build's lines are "
        "parsed on every worker)",
        beam="pipelines.transforms:read_step",
    ),
    Stage(
        "filter",
        "the corpus's metadata filter, on precomputed fields, before any download",
        spec_core="metadata_filter",
    ),
    Stage(
        "spread",
        "spread the record batches over every worker (a reference to each crosses; a text "
        "build's read spread its lines)",
        beam="pipelines.transforms:spread_step",
    ),
    Stage(
        "select",
        "a global top fraction by the corpus's rank (coyo: its CLIP similarity sum)",
        beam="pipelines.selection:select_step",
        applies=lambda spec, settings: spec.top_fraction(settings) is not None,
    ),
    # The text rules run before the fetch: what they remove is never downloaded.
    Stage(
        "decontaminate_text",
        "texts sharing a 13-word n-gram with an evaluation text (--decontaminate) removed",
        beam="pipelines.dedup_text:decontaminate_text_step",
        options=(DECONTAMINATE,),  # the image rules read the same flag
        reasons=(EVAL_CONTAMINATION,),
        applies=lambda spec, settings: bool(text_paths(settings)),
    ),
    Stage(
        "exclude_seen",
        "texts and image URLs another build kept (--exclude-seen) removed, before any download",
        beam="pipelines.dedup_text:exclude_seen_step",
        options=(EXCLUDE_SEEN,),
        reasons=(SEEN_IN_BLEND,),
        applies=lambda spec, settings: bool(seen_builds(settings)),
    ),
    Stage(
        "dedup_text",
        "duplicate texts removed (exact or MinHash near duplicates); the smallest id kept",
        beam="pipelines.dedup_text:dedup_text_step",
        options=(DEDUP_TEXT,),
        reasons=(DUPLICATE_TEXT, NEAR_DUPLICATE_TEXT),
        applies=lambda spec, settings: settings.stage_options.get(DEDUP_TEXT.name, "off") != "off",
    ),
    Stage(
        "duplicate_image_urls",
        "one record per image URL, and none past --max-image-repeats, before any download "
        "(with --dedup-images near or --max-image-repeats)",
        beam="pipelines.dedup_images:image_urls_step",
        reasons=(DUPLICATE_IMAGE, IMAGE_REPEATED),
        applies=lambda spec, settings: spec.images and image_dedup(settings).urls_first,
    ),
    Stage(
        FETCH,
        "download, check, resize and keep each image (through the image store)",
        beam="pipelines.transforms:fetch_step",
        applies=lambda spec, settings: spec.images,
    ),
    Stage(
        "exclude_seen_images",
        "images whose bytes another build kept under another URL (--exclude-seen) removed",
        beam="pipelines.dedup_text:exclude_seen_step",
        reasons=(SEEN_IN_BLEND,),
        applies=lambda spec, settings: spec.images and bool(seen_builds(settings)),
    ),
    Stage(
        "duplicate_images",
        "one copy of each image body (sha256) and none past --max-image-repeats",
        beam="pipelines.dedup_images:image_bytes_step",
        options=IMAGE_DEDUP_OPTIONS,
        reasons=(DUPLICATE_IMAGE, IMAGE_REPEATED),
        applies=lambda spec, settings: spec.images and image_dedup(settings).bytes_after,
    ),
    Stage(
        "near_duplicate_images",
        "perceptual near duplicates (--dedup-images near) and evaluation images "
        "(--decontaminate) by pHash, LSH buckets and connected components",
        beam="pipelines.dedup_images:near_images_step",
        reasons=(NEAR_DUPLICATE_IMAGE, EVAL_CONTAMINATION),  # --decontaminate: decontaminate_text's
        applies=lambda spec, settings: spec.images and image_dedup(settings).hashes,
    ),
    Stage(
        "clip",
        "CLIP scores: a pair's score, or a document's images re-placed by sentence",
        beam="pipelines.clip:clip_step",
        applies=lambda spec, settings: settings.clip is not None,
    ),
    Stage(
        "clip_near_duplicates",
        "images whose CLIP image embeddings are within --near-dup-clip-sim cosine of another's "
        "(random-hyperplane LSH buckets, connected components)",
        beam="pipelines.dedup_embeddings:clip_near_duplicates_step",
        options=(NEAR_DUP_CLIP_SIM_OPTION,),
        reasons=(NEAR_DUPLICATE_IMAGE,),
        applies=lambda spec, settings: (
            spec.images and settings.clip is not None and clip_sim(settings) is not None
        ),
        check=check_clip,
    ),
    Stage(
        "layout",
        "the corpus's layout: records with their images as the shards hold them",
        spec_core="layout",
    ),
    Stage(
        "dedup_index",
        "the build's hash index beside the manifest: kept images' sha256 and URLs, texts' hashes",
        beam="pipelines.dedup_text:index_step",
    ),
    Stage(
        "pack",
        "tokenize, pack into seq_len sequences, write the shards and their statistics",
        beam="pipelines.packing:pack_step",
    ),
)


def plugin_stages(environ: Mapping[str, str] = os.environ) -> tuple[Stage, ...]:
    """The stages of the modules ``CORPORA_STAGES`` names (module doc)."""
    found = []
    for name in filter(None, (part.strip() for part in environ.get(STAGES_ENV, "").split(","))):
        try:
            module = importlib.import_module(name)
        except ImportError as exc:
            raise StageError(f"{STAGES_ENV} names {name}, which cannot be imported: {exc}")
        for stage in getattr(module, "STAGES", ()):
            if stage.after is None:
                raise StageError(f"stage {stage.name} of {name}: say where it runs (after=…)")
            found.append(stage)
    return tuple(found)


def ordered(stages: Iterable[Stage], extra: Iterable[Stage]) -> tuple[Stage, ...]:
    """``stages`` with each of ``extra`` right after the stage its ``after``
    names (in the order given, when two follow the same stage).

    >>> a, b = Stage("a", "", core=len), Stage("b", "", core=len)
    >>> [s.name for s in ordered((a, b), (Stage("x", "", core=len, after="a"),))]
    ['a', 'x', 'b']
    >>> ordered((a,), (Stage("x", "", core=len, after="z"),))
    Traceback (most recent call last):
    ...
    corpora.stages.stage.StageError: stage x runs after z, which is no stage (a)
    """
    result = list(stages)
    for stage in extra:
        names = [s.name for s in result]
        if stage.name in names:
            raise StageError(f"stage {stage.name} is defined twice")
        if stage.after not in names:
            raise StageError(
                f"stage {stage.name} runs after {stage.after}, which is no stage "
                f"({', '.join(names)})"
            )
        place = names.index(stage.after) + 1
        while place < len(result) and result[place].after == stage.after:
            place += 1  # after the stages already placed there
        result.insert(place, stage)
    return tuple(result)


def all_stages() -> tuple[Stage, ...]:
    """Every stage a build may run, in order: :data:`STAGES` and the plugins'."""
    stages = ordered(STAGES, plugin_stages())
    check_options(stages)
    return stages


def active(spec: "CorpusSpec", settings: "BuildSettings") -> tuple[Stage, ...]:
    """The stages a build of ``spec`` with ``settings`` runs, in order."""
    return tuple(stage for stage in all_stages() if stage.runs(spec, settings))


def through(name: str, stages: Iterable[Stage]) -> tuple[Stage, ...]:
    """``stages`` up to and including the one named ``name`` (``corpora fetch``:
    up to :data:`FETCH`).

    >>> [s.name for s in through("b", (Stage("a", "", core=len), Stage("b", "", core=len),
    ...     Stage("c", "", core=len)))]
    ['a', 'b']
    """
    result = []
    for stage in stages:
        result.append(stage)
        if stage.name == name:
            return tuple(result)
    raise StageError(f"no stage {name} among {', '.join(s.name for s in result)}")


def options() -> dict[str, Option]:
    """Every stage's options by name, in the list's order."""
    return {option.name: option for stage in all_stages() for option in stage.options}


def stage_options(given: Mapping[str, Any]) -> dict[str, Any]:
    """Every stage option's stored value (``given`` may leave options out, or
    give ``None``: their defaults); a value an option refuses raises
    ``ValueError``."""
    return {name: option.value(given.get(name)) for name, option in options().items()}


def check_settings(settings: "BuildSettings") -> None:
    """Each stage's check of ``settings`` (an option another flag must come
    with): ``ValueError`` with one line for the first that refuses them."""
    for stage in all_stages():
        if stage.check is not None:
            stage.check(settings)


def check_options(stages: tuple[Stage, ...]) -> None:
    seen: dict[str, str] = {}
    for stage in stages:
        for name in stage.option_names:
            if name in seen:
                raise StageError(
                    f"option {name} is declared by stages {seen[name]} and {stage.name}"
                )
            seen[name] = stage.name


__all__ = [
    "FETCH",
    "STAGES",
    "STAGES_ENV",
    "Stage",
    "StageError",
    "active",
    "check_options",
    "check_settings",
    "all_stages",
    "options",
    "ordered",
    "plugin_stages",
    "stage_options",
    "through",
]
