"""Corpus layouts: how a source document becomes the records that are packed.

``mmc4_pairs`` is VILA's pseudo-interleaved ablation: every image of an MMC4
document becomes its own record ``[image, text_list[matched_text_index]]``.
The funnel unit of ``mmc4-pairs`` is the pair: a document with three images
enters the funnel as three records (a line that cannot be parsed at all
enters as one, dropped with its reason).
"""

from __future__ import annotations

from typing import Iterator

from corpora.record import Document, Drop, ImageChunk, TextChunk, stable_id
from corpora.sources.mmc4.document import Mmc4Document
from corpora.sources.mmc4.document import reassign as reassigned


def pair_id(document_id: str, image_index: int) -> str:
    return "mmc4p-" + stable_id(document_id, image_index)


def mmc4_pairs(doc: Mmc4Document, corpus: str = "mmc4-pairs") -> Iterator[Document | Drop]:
    """One record per image: the image, then its matched sentence.

    >>> from corpora.sources.mmc4.document import Mmc4Document, Mmc4Image
    >>> doc = Mmc4Document("d", "http://page", ("a.", "b.", "c."),
    ...     (Mmc4Image("http://i/1.jpg", 2, 0.3), Mmc4Image("http://i/2.jpg", 0, 0.2)))
    >>> [[c.kind for c in r.chunks] + [r.chunks[1].text] for r in mmc4_pairs(doc)]
    [['image', 'text', 'c.'], ['image', 'text', 'a.']]
    """
    if not doc.images:
        yield Drop("no_images", doc.id, url=doc.url)
        return
    for index, image in enumerate(doc.images):
        rid = pair_id(doc.id, index)
        if not image.raw_url:
            yield Drop("missing_image_url", rid, url=doc.url)
            continue
        position = image.matched_text_index
        if position is None or not 0 <= position < len(doc.text_list):
            yield Drop(
                "matched_text_index_out_of_range",
                rid,
                url=image.raw_url,
                detail=f"matched_text_index={position}, {len(doc.text_list)} sentences",
            )
            continue
        sentence = doc.text_list[position].strip()
        if not sentence:
            yield Drop("empty_text", rid, url=image.raw_url)
            continue
        scores = {} if image.matched_sim is None else {"matched_sim": image.matched_sim}
        yield Document(
            id=rid,
            corpus=corpus,
            chunks=(
                ImageChunk(url=image.raw_url, scores=scores, meta={"image_name": image.image_name}),
                TextChunk(sentence),
            ),
            source_url=doc.url,
            meta={
                "document_id": doc.id,
                "image_index": index,
                "matched_text_index": position,
                "source_file": doc.source_file,
                "line": doc.line,
            },
        )


# --- mmc4 (interleaved) and mmc4-reordered -------------------------------------
#
# Both are built from one normalised record per MMC4 document
# (:func:`mmc4_document`): its sentences in document order, each image placed
# immediately before the sentence it is matched to. Metadata filters
# (:func:`corpora.sources.filters.mmc4_filter`) remove images from that record before
# any download; the fetch stage removes images that fail; the layout stage
# (:func:`mmc4_interleaved` or :func:`mmc4_reordered`) runs last, on the images
# that are left. The funnel unit is the document.


def mmc4_document(
    doc: Mmc4Document, corpus: str = "mmc4", reassign: bool = False
) -> Document | Drop:
    """An MMC4 document as one record, images before their matched sentences.

    With ``reassign`` the assignment is recomputed from ``similarity_matrix``
    (:func:`corpora.sources.mmc4.assign.assign_images`); otherwise the upstream
    ``matched_text_index`` must be a one-to-one assignment into ``text_list``.

    >>> from corpora.sources.mmc4.document import Mmc4Document, Mmc4Image
    >>> doc = Mmc4Document("d", "http://page", ("a.", "b.", "c."),
    ...     (Mmc4Image("http://i/1.jpg", 2, 0.3), Mmc4Image("http://i/2.jpg", 0, 0.2)))
    >>> [c.text if c.kind == "text" else c.url for c in mmc4_document(doc).chunks]
    ['http://i/2.jpg', 'a.', 'b.', 'http://i/1.jpg', 'c.']
    """
    sentences = len(doc.text_list)
    if not any(text.strip() for text in doc.text_list):
        return Drop("empty_text_list", doc.id, url=doc.url)
    if not doc.images:
        return Drop("no_images", doc.id, url=doc.url)
    if reassign:
        result = reassigned(doc)
        if isinstance(result, Drop):
            return result
        doc = result
    indices = [image.matched_text_index for image in doc.images]
    sims = [image.matched_sim for image in doc.images]
    if not reassign:
        # upstream's assignment must be one-to-one; --reassign repairs one that is not
        if len(doc.images) > sentences:
            return Drop(
                "more_images_than_sentences",
                doc.id,
                url=doc.url,
                detail=f"{len(doc.images)} images, {sentences} sentences",
            )
        bad = [i for i in indices if i is None or not 0 <= i < sentences]
        if bad:
            return Drop(
                "matched_text_index_out_of_range",
                doc.id,
                url=doc.url,
                detail=f"matched_text_index={bad[0]}, {sentences} sentences",
            )
        if len(set(indices)) != len(indices):
            return Drop(
                "duplicate_matched_text_index",
                doc.id,
                url=doc.url,
                detail=f"matched_text_index={indices}",
            )
    before: dict[int, list[ImageChunk]] = {}
    missing_urls = 0
    for index, (image, position, sim) in enumerate(zip(doc.images, indices, sims)):
        assert position is not None
        if not image.raw_url:
            missing_urls += (
                1  # an image without a URL cannot be placed; the rest of the document can
            )
            continue
        before.setdefault(position, []).append(
            ImageChunk(
                url=image.raw_url,
                scores={} if sim is None else {"matched_sim": sim},
                meta={
                    "image_index": index,
                    "matched_text_index": position,
                    "image_name": image.image_name,
                },
            )
        )
    chunks: list[ImageChunk | TextChunk] = []
    for position, text in enumerate(doc.text_list):
        chunks.extend(before.get(position, ()))
        if text.strip():
            chunks.append(TextChunk(text.strip()))
    meta = {
        "sentences": sentences,
        "images": len(doc.images),
        "matched_sims": [None if s is None else float(s) for s in sims],
        "reassigned": reassign,
        "could_have_url_duplicate": doc.could_have_url_duplicate,
        "source_file": doc.source_file,
        "line": doc.line,
    }
    if missing_urls:
        meta["images_without_url"] = missing_urls
    return Document(id=doc.id, corpus=corpus, chunks=tuple(chunks), source_url=doc.url, meta=meta)


def _require_images(doc: Document, keep_imageless: bool, reason: str) -> Document | Drop:
    if doc.images or keep_imageless:
        return doc
    if "clip_model" in doc.meta:
        # the CLIP stage names its model only on a document that still had images,
        # so it removed the last of them
        reason = "no_images_after_clip"
    return Drop(reason, doc.id, url=doc.source_url)


def mmc4_interleaved(doc: Document, keep_imageless: bool = False) -> Document | Drop:
    """The interleaved layout (VILA, OpenFlamingo): sentences in document
    order, each image immediately before its matched sentence, which is how
    :func:`mmc4_document` already orders the chunks. A document whose images
    all failed to fetch is dropped unless ``keep_imageless``."""
    return _require_images(doc, keep_imageless, "no_images_after_fetch")


def mmc4_reordered(doc: Document, keep_imageless: bool = False) -> Document | Drop:
    """VILA's reordering ablation: every image first, in its original order
    in ``image_info``, then every sentence in document order.

    >>> doc = Document("d", "mmc4-reordered", (ImageChunk("u2", meta={"image_index": 1}),
    ...     TextChunk("a."), TextChunk("b."), ImageChunk("u1", meta={"image_index": 0}),
    ...     TextChunk("c.")))
    >>> [c.text if c.kind == "text" else c.url for c in mmc4_reordered(doc).chunks]
    ['u1', 'u2', 'a.', 'b.', 'c.']
    """
    checked = _require_images(doc, keep_imageless, "no_images_after_fetch")
    if isinstance(checked, Drop):
        return checked
    images = sorted(doc.images, key=lambda image: image.meta.get("image_index", 0))
    return doc.replace(chunks=(*images, *doc.texts))
