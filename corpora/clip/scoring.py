"""Scores from embeddings: a pair's image-text similarity, a document's image
x sentence matrix and the assignment of its images to sentences, and the
removal of images below a minimum."""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from corpora.clip.loading import ClipModel
from corpora.clip.settings import SCORE, SCORE_DECIMALS
from corpora.dedup.embeddings import with_embeddings
from corpora.record import Document, Drop, ImageChunk, TextChunk, open_image
from corpora.sources.mmc4.assign import assign_images


def decode_image(data: bytes | None):
    """Encoded image bytes → an RGB PIL image, or ``None`` if they do not decode."""

    if not data:
        return None
    try:
        with open_image(data) as image:
            return image.convert("RGB")
    except Exception:  # Pillow raises a zoo of types for corrupt data
        return None


def pair_scores(image_embeddings: np.ndarray, text_embeddings: np.ndarray) -> np.ndarray:
    """Row-wise cosine similarity of unit-norm embeddings.

    >>> pair_scores(np.array([[1.0, 0.0], [0.6, 0.8]]), np.array([[0.6, 0.8], [0.6, 0.8]]))
    array([0.6, 1. ])
    """
    return np.einsum("nd,nd->n", image_embeddings, text_embeddings)


def similarity_matrix(image_embeddings: np.ndarray, sentence_embeddings: np.ndarray) -> np.ndarray:
    """Image × sentence cosine similarities, ``[n_images, n_sentences]``.

    >>> images = np.array([[1.0, 0.0], [0.0, 1.0]])
    >>> similarity_matrix(images, np.array([[0.6, 0.8], [1.0, 0.0], [0.0, 1.0]]))
    array([[0.6, 1. , 0. ],
           [0.8, 0. , 1. ]])
    """
    return image_embeddings @ sentence_embeddings.T


def round_score(value: float) -> float:
    return round(float(value), SCORE_DECIMALS)


@dataclasses.dataclass(frozen=True)
class ScoredPair:
    """A scored pair record and the embeddings its score came from."""

    doc: Document
    score: float
    image_embedding: np.ndarray
    text_embedding: np.ndarray


def pair_parts(doc: Document) -> tuple[ImageChunk, str] | Drop:
    """The one image and the text of a pair record, or why it cannot be scored."""
    images = doc.images
    if len(images) != 1:
        return Drop("clip_not_a_pair", doc.id, detail=f"{len(images)} images", url=doc.source_url)
    if not images[0].fetched:
        return Drop("clip_no_image_data", doc.id, url=images[0].url)
    text = " ".join(
        c.text.strip() for c in doc.chunks if isinstance(c, TextChunk) and c.text.strip()
    )
    if not text:
        return Drop("clip_no_text", doc.id, url=images[0].url)
    return images[0], text


def with_score(doc: Document, score: float, model_id: str) -> Document:
    """``doc`` with ``score`` on its image and the model's name in its meta."""
    chunks = tuple(
        dataclasses.replace(c, scores={**c.scores, SCORE: score})
        if isinstance(c, ImageChunk)
        else c
        for c in doc.chunks
    )
    return doc.replace(chunks=chunks).with_meta(clip_model=model_id)


def score_pairs(docs: Sequence[Document], model: ClipModel) -> list[ScoredPair | Drop]:
    """Score pair records (one image, its text), in the order given.

    A record whose image does not decode is dropped as
    ``clip_image_undecodable``; nothing here raises for bad data.
    """
    results: list[ScoredPair | Drop | None] = [None] * len(docs)
    images, texts, positions = [], [], []
    for position, doc in enumerate(docs):
        parts = pair_parts(doc)
        if isinstance(parts, Drop):
            results[position] = parts
            continue
        image_chunk, text = parts
        image = decode_image(image_chunk.data)
        if image is None:
            results[position] = Drop("clip_image_undecodable", doc.id, url=image_chunk.url)
            continue
        images.append(model.image_tensor(image))
        texts.append(text)
        positions.append(position)
    if positions:
        image_embeddings = model.encode_images(images)
        text_embeddings = model.encode_texts(texts)
        scores = pair_scores(image_embeddings, text_embeddings)
        model_id = model.settings.model_id
        for row, position in enumerate(positions):
            score = round_score(scores[row])
            results[position] = ScoredPair(
                with_score(docs[position], score, model_id),
                score,
                image_embeddings[row],
                text_embeddings[row],
            )
    return results  # type: ignore[return-value]


@dataclasses.dataclass(frozen=True)
class DocumentSimilarity:
    """An interleaved document's image × sentence similarity matrix.

    Rows follow the document's images, columns its text chunks, both in
    reading order. The row of an image without data or that does not decode
    is NaN, and its index is in ``undecodable``.
    """

    matrix: np.ndarray
    undecodable: tuple[int, ...]
    # each decoded image's embedding by its position (what --near-dup-clip-sim compares)
    embeddings: dict[int, np.ndarray] = dataclasses.field(default_factory=dict)


def document_similarity(doc: Document, model: ClipModel) -> DocumentSimilarity:
    """The image × sentence CLIP similarity matrix of an MMC4-style document.

    This is the matrix MMC4 computed with ViT-L/14 to place images
    (``similarity_matrix`` in its ``image_info``); assigning images to
    sentences from it is the layout's job.
    """
    return document_similarities([doc], model)[0]


def document_similarities(docs: Sequence[Document], model: ClipModel) -> list[DocumentSimilarity]:
    """:func:`document_similarity` for many documents, their images and
    sentences encoded together in full batches (a document holds only a few)."""
    tensors, texts, layout = [], [], []
    for doc in docs:
        sentences = [c.text for c in doc.chunks if isinstance(c, TextChunk)]
        rows, undecodable = [], []
        for index, image in enumerate(doc.images):
            picture = decode_image(image.data)
            if picture is None:
                undecodable.append(index)
            else:
                rows.append((index, len(tensors)))
                tensors.append(model.image_tensor(picture))
        layout.append((len(doc.images), rows, tuple(undecodable), len(texts), len(sentences)))
        texts.extend(sentences)
    image_embeddings = model.encode_images(tensors) if tensors else None
    text_embeddings = model.encode_texts(texts) if texts else None
    results = []
    for n_images, rows, undecodable, first_text, n_texts in layout:
        matrix = np.full((n_images, n_texts), np.nan, dtype=np.float32)
        if rows and n_texts:
            sentences = text_embeddings[first_text : first_text + n_texts]
            matrix[[r for r, _ in rows]] = similarity_matrix(
                image_embeddings[[e for _, e in rows]], sentences
            )
        embeddings = {r: image_embeddings[e] for r, e in rows}
        results.append(DocumentSimilarity(matrix, undecodable, embeddings))
    return results


def assign_by_clip(doc: Document, similarity: DocumentSimilarity, model_id: str) -> Document | Drop:
    """Re-place ``doc``'s images by its computed similarity matrix.

    Images are assigned to sentences by :func:`corpora.sources.mmc4.assign.assign_images`
    (the ``--reassign`` matching) on the rows of the images that decode, and
    each is placed immediately before its sentence
    (:func:`place_images`). Each image gets its matched cell
    as ``scores["clip_sim"]`` and the sentence's position among the document's
    sentences as ``meta["clip_text_index"]``; an image that does not decode is
    removed and counted in ``meta["images_removed"]``. A document without
    images passes unchanged, for the layout to judge.
    """
    images = doc.images
    if not images:
        return doc
    if not doc.texts:
        return Drop("clip_no_text", doc.id, url=doc.source_url)
    rows = [i for i in range(len(images)) if i not in set(similarity.undecodable)]
    assigned, sims = assign_images(similarity.matrix[rows]) if rows else ([], [])
    matched: list[int | None] = [None] * len(images)
    scored = list(images)
    for row, sentence, sim in zip(rows, assigned, sims):
        matched[row] = sentence
        scored[row] = dataclasses.replace(
            images[row],
            scores={**images[row].scores, SCORE: round_score(sim)},
            meta={**images[row].meta, "clip_text_index": sentence},
        )
    iterator = iter(scored)
    doc = doc.replace(
        chunks=tuple(next(iterator) if isinstance(c, ImageChunk) else c for c in doc.chunks)
    )
    doc = place_images(doc, matched).with_meta(clip_model=model_id)
    return _count_removed(doc, "clip_image_undecodable", len(similarity.undecodable))


def score_documents(
    docs: Sequence[Document], model: ClipModel, keep_embeddings: bool = False
) -> list[Document | Drop]:
    """Score and re-place the images of interleaved documents (``mmc4``), in
    the order given: :func:`document_similarities`, then :func:`assign_by_clip`.
    ``keep_embeddings``: each image keeps its embedding in its meta
    (:func:`corpora.dedup.embeddings.with_embeddings`)."""
    similarities = document_similarities(docs, model)
    return [
        assign_by_clip(
            with_embeddings(doc, similarity.embeddings) if keep_embeddings else doc,
            similarity,
            model.settings.model_id,
        )
        for doc, similarity in zip(docs, similarities)
    ]


def remove_images_below(doc: Document, min_sim: float) -> Document:
    """``doc`` without the images whose computed score is below ``min_sim``,
    counted in ``meta["images_removed"]["clip_similarity_below_min"]``. The document
    stays (its layout drops it if no image is left).

    >>> doc = Document("d", "mmc4", (ImageChunk("u0", scores={"clip_sim": 0.31}), TextChunk("a."),
    ...     ImageChunk("u1", scores={"clip_sim": 0.12}), TextChunk("b.")))
    >>> kept = remove_images_below(doc, 0.2)
    >>> [c.text if c.kind == "text" else c.url for c in kept.chunks], kept.meta["images_removed"]
    (['u0', 'a.', 'b.'], {'clip_similarity_below_min': 1})
    """
    chunks = tuple(
        c
        for c in doc.chunks
        if not isinstance(c, ImageChunk) or c.scores.get(SCORE, float("-inf")) >= min_sim
    )
    return _count_removed(
        doc.replace(chunks=chunks), "clip_similarity_below_min", len(doc.chunks) - len(chunks)
    )


def _count_removed(doc: Document, reason: str, count: int) -> Document:
    if not count:
        return doc
    removed = dict(doc.meta.get("images_removed") or {})
    removed[reason] = removed.get(reason, 0) + count
    return doc.with_meta(images_removed=removed)


def place_images(doc: Document, matched: Sequence[int | None]) -> Document:
    """``doc`` with each image moved before a newly matched sentence.

    ``matched[i]`` is the new sentence of ``doc.images[i]``, as an index into
    the document's text chunks (``doc.texts``); ``None`` removes the image.
    Sentences keep their order; the images before one sentence keep their
    order in ``image_info`` (``meta["image_index"]``), as in MMC4's layout
    (:func:`corpora.sources.mmc4.layouts.mmc4_document`). The CLIP stage uses
    this to re-place images after assigning them from its own similarity matrix.

    >>> doc = Document("d", "mmc4", (ImageChunk("u0", meta={"image_index": 0}), TextChunk("a."),
    ...     TextChunk("b."), ImageChunk("u1", meta={"image_index": 1}), TextChunk("c.")))
    >>> [c.text if c.kind == "text" else c.url for c in place_images(doc, [2, 0]).chunks]
    ['u1', 'a.', 'b.', 'u0', 'c.']
    >>> [c.text if c.kind == "text" else c.url for c in place_images(doc, [None, 1]).chunks]
    ['a.', 'u1', 'b.', 'c.']
    """
    images, texts = doc.images, doc.texts
    if len(matched) != len(images):
        raise ValueError(f"{len(matched)} matched indices for {len(images)} images")
    before: dict[int, list[tuple[int, ImageChunk]]] = {}
    for position, (image, sentence) in enumerate(zip(images, matched)):
        if sentence is None:
            continue
        if not 0 <= sentence < len(texts):
            raise ValueError(
                f"image {position} matched to sentence {sentence}, {len(texts)} sentences"
            )
        before.setdefault(sentence, []).append((image.meta.get("image_index", position), image))
    chunks: list[ImageChunk | TextChunk] = []
    for sentence, text in enumerate(texts):
        chunks.extend(
            image for _, image in sorted(before.get(sentence, ()), key=lambda entry: entry[0])
        )
        chunks.append(text)
    return doc.replace(chunks=tuple(chunks))
