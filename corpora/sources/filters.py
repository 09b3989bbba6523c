"""Metadata filters: cheap decisions on precomputed fields, before any download.

Each filter takes a record and the corpus options (see
:mod:`corpora.config.settings`) and returns the record (kept, or changed: an MMC4
document can lose images here) or a :class:`~corpora.record.Drop` with its
reason. Nothing here fetches or decodes anything: what is thrown away here is
never downloaded.
"""

from __future__ import annotations

from typing import Any, Mapping

from corpora.record import Document, Drop, ImageChunk

# mmc4-core (Zhu et al. 2023, "Multimodal C4"): 4-40 sentences, 2-15 images,
# and at least 75% of the image-sentence assignments above 0.25 similarity.
MMC4_CORE = {
    "min_sentences": 4,
    "max_sentences": 40,
    "min_images": 2,
    "max_images": 15,
    "similarity": 0.25,
    "min_fraction_similar": 0.75,
}
PRESETS = {"core": MMC4_CORE}  # --preset NAME


def coyo_filter(doc: Document, options: Mapping[str, Any]) -> Document | Drop:
    """COYO's filters on its precomputed columns.

    - ``min_clip_sim``: keep rows whose ``clip_similarity_vitb32 +
      clip_similarity_vitl14`` is at least this (VILA's COYO-25M: 0.6);
    - ``max_nsfw``: drop rows where either NSFW score is above this;
    - ``min_size``: drop rows whose upstream width or height is below this;
    - ``max_aspect_ratio``: drop rows whose longer side over shorter side is above this.

    >>> doc = Document("coyo-1", "coyo", (), meta={"clip_similarity_vitb32": 0.32,
    ...     "clip_similarity_vitl14": 0.25, "width": 600, "height": 447})
    >>> coyo_filter(doc, {"min_clip_sim": 0.6}).reason
    'clip_similarity_below_min'
    >>> coyo_filter(doc, {"min_clip_sim": 0.5, "max_aspect_ratio": 1.5}).id
    'coyo-1'
    """
    meta = doc.meta
    minimum = options.get("min_clip_sim")
    if minimum is not None:
        b32, l14 = meta.get("clip_similarity_vitb32"), meta.get("clip_similarity_vitl14")
        if b32 is None or l14 is None:
            return Drop("missing_clip_similarity", doc.id, url=doc.source_url)
        total = float(b32) + float(l14)
        if total < minimum:
            return Drop(
                "clip_similarity_below_min",
                doc.id,
                url=doc.source_url,
                detail=f"vitb32 + vitl14 = {total:.4f} < {minimum}",
            )
    maximum = options.get("max_nsfw")
    if maximum is not None:
        scores = [meta.get("nsfw_score_opennsfw2"), meta.get("nsfw_score_gantman")]
        if all(s is None for s in scores):
            return Drop("missing_nsfw_score", doc.id, url=doc.source_url)
        worst = max(float(s) for s in scores if s is not None)
        if worst > maximum:
            return Drop(
                "nsfw_above_max", doc.id, url=doc.source_url, detail=f"{worst:.4f} > {maximum}"
            )
    min_size, max_ratio = options.get("min_size"), options.get("max_aspect_ratio")
    if min_size or max_ratio is not None:
        width, height = meta.get("width"), meta.get("height")
        if not width or not height or width < 0 or height < 0:
            return Drop("missing_size", doc.id, url=doc.source_url)
        if min_size and min(width, height) < min_size:
            return Drop(
                "image_too_small",
                doc.id,
                url=doc.source_url,
                detail=f"{width}x{height}, min_size {min_size}",
            )
        if max_ratio is not None and max(width, height) / min(width, height) > max_ratio:
            return Drop(
                "aspect_ratio_above_max",
                doc.id,
                url=doc.source_url,
                detail=f"{width}x{height}, max_aspect_ratio {max_ratio}",
            )
    return doc


def mmc4_filter(doc: Document, options: Mapping[str, Any]) -> Document | Drop:
    """MMC4's filters, on a document from :func:`corpora.sources.mmc4.layouts.mmc4_document`.

    - ``preset="core"``: the mmc4-core definition (:data:`MMC4_CORE`), on the
      whole upstream document;
    - ``min_sim``: remove images whose ``matched_sim`` is below this
      (OpenFlamingo: 0.24);
    - ``max_images``: keep at most this many images, the first in reading
      order (VILA: 6);
    - a document left with no image is dropped (``no_images_after_filter``)
      unless ``keep_imageless``.

    >>> from corpora.record import TextChunk
    >>> doc = Document("d", "mmc4", (ImageChunk("u1", scores={"matched_sim": 0.2}), TextChunk("a."),
    ...     ImageChunk("u2", scores={"matched_sim": 0.3}), TextChunk("b.")))
    >>> [c.kind for c in mmc4_filter(doc, {"min_sim": 0.24}).chunks]
    ['text', 'image', 'text']
    >>> mmc4_filter(doc, {"min_sim": 0.5}).reason
    'no_images_after_filter'
    """
    if options.get("preset") is not None:
        core = PRESETS[options["preset"]]
        sentences, images = doc.meta.get("sentences", 0), doc.meta.get("images", 0)
        if not core["min_sentences"] <= sentences <= core["max_sentences"]:
            return Drop(
                "core_sentence_count", doc.id, url=doc.source_url, detail=f"{sentences} sentences"
            )
        if not core["min_images"] <= images <= core["max_images"]:
            return Drop("core_image_count", doc.id, url=doc.source_url, detail=f"{images} images")
        sims = doc.meta.get("matched_sims") or []
        similar = sum(1 for s in sims if s is not None and s > core["similarity"])
        if not sims or similar < core["min_fraction_similar"] * len(sims):
            return Drop(
                "core_low_similarity",
                doc.id,
                url=doc.source_url,
                detail=f"{similar} of {len(sims)} assignments above {core['similarity']}",
            )
    min_sim = options.get("min_sim")
    max_images = options.get("max_images")
    kept_images = 0
    removed = {"clip_similarity_below_min": 0, "over_max_images": 0}
    chunks = []
    for chunk in doc.chunks:
        if isinstance(chunk, ImageChunk):
            sim = chunk.scores.get("matched_sim")
            if min_sim is not None and (sim is None or sim < min_sim):
                removed["clip_similarity_below_min"] += 1
                continue
            if max_images and kept_images >= max_images:
                removed["over_max_images"] += 1
                continue
            kept_images += 1
        chunks.append(chunk)
    if kept_images == 0 and not options.get("keep_imageless", False):
        return Drop("no_images_after_filter", doc.id, url=doc.source_url)
    if len(chunks) == len(doc.chunks):
        return doc
    return doc.replace(chunks=tuple(chunks)).with_meta(
        images_removed={k: v for k, v in removed.items() if v}
    )


def wit_filter(doc: Document, options: Mapping[str, Any]) -> Document | Drop:
    """WIT's filter: ``languages`` (Wikipedia language codes) to keep.

    >>> doc = Document("wit-1", "wit", (), meta={"language": "de"})
    >>> wit_filter(doc, {"languages": ["en", "fr"]}).reason
    'language_not_selected'
    """
    languages = options.get("languages")
    if languages and doc.meta.get("language") not in languages:
        return Drop(
            "language_not_selected",
            doc.id,
            url=doc.source_url,
            detail=f"language {doc.meta.get('language')!r}",
        )
    return doc


def coyo_clip_sum(doc: Document) -> float | None:
    """The score COYO rows are ranked by (VILA's COYO-25M):
    ``clip_similarity_vitb32 + clip_similarity_vitl14``; ``None`` if either is missing.

    >>> coyo_clip_sum(Document("c", "coyo", (), meta={"clip_similarity_vitb32": 0.25,
    ...                                               "clip_similarity_vitl14": 0.5}))
    0.75
    """
    b32, l14 = doc.meta.get("clip_similarity_vitb32"), doc.meta.get("clip_similarity_vitl14")
    if b32 is None or l14 is None:
        return None
    return float(b32) + float(l14)
