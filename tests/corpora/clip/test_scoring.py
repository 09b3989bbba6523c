"""Scores from a tiny open_clip architecture with random weights made here."""

from __future__ import annotations

import numpy as np
import pytest

from corpora import clip
from corpora.clip import scoring
from corpora.record import Document, Drop, ImageChunk, TextChunk
from tests.clip_model import (  # noqa: F401  (tiny_clip is a fixture)
    CAPTIONS,
    SAMPLE_IMAGES,
    TINY_NAME,
    direct_scores,
    jpeg,
    pair,
    sample_pairs,
    tiny_clip,
)

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def test_pair_scores_equal_open_clip_cosine_similarity(model, tiny_clip):  # noqa: F811
    docs = sample_pairs()
    results = clip.score_pairs(docs, model)
    expected = direct_scores(
        tiny_clip, [d.images[0].data for d in docs], [d.texts[0].text for d in docs]
    )
    scores = np.array([r.score for r in results])
    np.testing.assert_allclose(scores, expected, atol=1e-5)
    assert len(set(scores.round(3))) == len(docs)  # a real spread, not one value
    for result in results:
        assert result.doc.images[0].scores[clip.SCORE] == result.score
        assert result.doc.meta["clip_model"] == f"{TINY_NAME}/tiny.pt"
        assert result.image_embedding.dtype == np.float32 and result.image_embedding.shape == (32,)
        np.testing.assert_allclose(np.linalg.norm(result.text_embedding), 1.0, rtol=1e-5)


def test_a_records_score_does_not_depend_on_its_batch_neighbours(model):
    docs = sample_pairs()
    together = clip.score_pairs(docs, model)  # batches of 3, 3 and a padded 2
    for index in (0, 4, 7):
        alone = clip.score_pairs([docs[index]], model)[0]
        assert np.array_equal(alone.image_embedding, together[index].image_embedding)
        assert np.array_equal(alone.text_embedding, together[index].text_embedding)
        assert alone.score == together[index].score


def test_undecodable_or_missing_images_are_named_drops_in_place(model):
    docs = sample_pairs()[:3]
    broken = pair("broken", b"\xff\xd8 not really a jpeg", "a broken image")
    missing = pair("missing", None, "never fetched")
    no_text = pair("no-text", docs[0].images[0].data, "   ")
    results = clip.score_pairs([docs[0], broken, docs[1], missing, no_text, docs[2]], model)
    assert [r.reason if isinstance(r, Drop) else r.doc.id for r in results] == [
        "p0",
        "clip_image_undecodable",
        "p1",
        "clip_no_image_data",
        "clip_no_text",
        "p2",
    ]
    assert results[1].url == "http://images.test/broken.jpg"


def test_document_similarity_is_the_image_by_sentence_matrix(model, tiny_clip):  # noqa: F811
    images = [jpeg(path) for path in SAMPLE_IMAGES[:3]]
    sentences = CAPTIONS[:4]
    doc = Document(
        id="doc",
        corpus="mmc4",
        chunks=(
            TextChunk(sentences[0]),
            ImageChunk("u0", data=images[0]),
            TextChunk(sentences[1]),
            ImageChunk("u1", data=b"garbage"),
            TextChunk(sentences[2]),
            ImageChunk("u2", data=images[2]),
            TextChunk(sentences[3]),
        ),
    )
    result = clip.document_similarity(doc, model)
    assert result.matrix.shape == (3, 4) and result.undecodable == (1,)
    assert np.isnan(result.matrix[1]).all()
    for row, data in ((0, images[0]), (2, images[2])):
        np.testing.assert_allclose(
            result.matrix[row], direct_scores(tiny_clip, [data] * 4, sentences), atol=1e-5
        )
    text_only = Document(id="t", corpus="mmc4", chunks=(TextChunk("just words"),))
    batched = clip.document_similarities([doc, text_only, doc], model)
    assert [b.matrix.shape for b in batched] == [(3, 4), (0, 1), (3, 4)]
    np.testing.assert_array_equal(batched[2].matrix, result.matrix)


def test_documents_are_assigned_by_their_matrix_and_images_re_placed(model, tiny_clip):  # noqa: F811
    from corpora.sources.mmc4.assign import assign_images

    images = [jpeg(path) for path in SAMPLE_IMAGES[:4]]
    sentences = CAPTIONS[:3]
    doc = Document(
        id="doc",
        corpus="mmc4",
        source_url="http://pages.test/doc",
        chunks=(
            ImageChunk("u0", data=images[0], scores={"matched_sim": 0.3}, meta={"image_index": 0}),
            TextChunk(sentences[0]),
            ImageChunk("u1", data=images[1], meta={"image_index": 1}),
            TextChunk(sentences[1]),
            ImageChunk("u2", data=b"garbage", meta={"image_index": 2}),
            ImageChunk("u3", data=images[3], meta={"image_index": 3}),
            TextChunk(sentences[2]),
        ),
    )
    matrix = np.stack([direct_scores(tiny_clip, [images[i]] * 3, sentences) for i in (0, 1, 3)])
    computed = clip.document_similarity(doc, model).matrix
    np.testing.assert_allclose(computed[[0, 1, 3]], matrix, atol=1e-5)
    matched, sims = assign_images(computed[[0, 1, 3]])
    assert matched == assign_images(matrix)[0]  # the same assignment as on open_clip's own matrix

    scored = clip.score_documents([doc], model)[0]
    before = {}
    for url, sentence in zip(("u0", "u1", "u3"), matched):
        before.setdefault(sentence, []).append(url)
    expected = [part for j, text in enumerate(sentences) for part in (*before.get(j, []), text)]
    assert [c.text if c.kind == "text" else c.url for c in scored.chunks] == expected
    by_url = sorted(
        scored.images, key=lambda image: image.url
    )  # u0, u1, u3: the rows of the matrix
    for image, sentence, sim in zip(by_url, matched, sims):
        assert image.meta["clip_text_index"] == sentence
        assert image.scores[clip.SCORE] == clip.round_score(sim)
    assert by_url[0].scores["matched_sim"] == 0.3  # upstream's score stays beside the computed one
    assert scored.meta["clip_model"] == f"{TINY_NAME}/tiny.pt"
    assert scored.meta["images_removed"] == {"clip_image_undecodable": 1}

    lowest = min(sims)
    kept = clip.remove_images_below(scored, lowest + 1e-6)
    assert len(kept.images) == 2 and [c.text for c in kept.texts] == sentences
    assert kept.meta["images_removed"] == {
        "clip_image_undecodable": 1,
        "clip_similarity_below_min": 1,
    }

    # --near-dup-clip-sim: each image keeps its embedding (unit length), wherever it moved
    from corpora.dedup.embeddings import IMAGE_EMBEDDING

    assert not any(IMAGE_EMBEDDING in image.meta for image in scored.images)
    embedded = clip.score_documents([doc], model, keep_embeddings=True)[0]
    assert [i.url for i in embedded.images] == [i.url for i in scored.images]
    for image in embedded.images:
        vector = image.meta[IMAGE_EMBEDDING]
        assert abs(float(np.linalg.norm(vector)) - 1.0) < 1e-3
    first = next(image for image in embedded.images if image.url == "u0")
    alone = model.encode_images([model.image_tensor(scoring.decode_image(images[0]))])[0]
    expected = alone / np.linalg.norm(alone)
    np.testing.assert_allclose(first.meta[IMAGE_EMBEDDING], expected, atol=2e-4)

    text_only = Document("t", "mmc4", (TextChunk("just words"),))
    assert clip.score_documents([text_only], model) == [text_only]
    no_text = Document("n", "mmc4", (ImageChunk("u", data=images[0]),))
    assert clip.score_documents([no_text], model)[0].reason == "clip_no_text"


def test_docstring_arrays_for_scores_and_matrix():
    np.testing.assert_allclose(
        clip.pair_scores(np.array([[1.0, 0.0], [0.6, 0.8]]), np.array([[0.6, 0.8], [0.6, 0.8]])),
        [0.6, 1.0],
    )
    np.testing.assert_allclose(
        clip.similarity_matrix(
            np.array([[1.0, 0.0], [0.0, 1.0]]), np.array([[0.6, 0.8], [1.0, 0.0], [0.0, 1.0]])
        ),
        [[0.6, 1.0, 0.0], [0.8, 0.0, 1.0]],
    )


def _order(doc: Document) -> list[str]:
    return [c.text if c.kind == "text" else c.url for c in doc.chunks]


def test_place_images_moves_each_image_before_its_new_sentence():
    image = lambda i: ImageChunk(f"u{i}", meta={"image_index": i})  # noqa: E731
    doc = Document(
        "d",
        "mmc4",
        (
            TextChunk("a."),
            image(0),
            TextChunk("b."),
            image(2),
            TextChunk("c."),
            image(1),
            TextChunk("d."),
        ),
        meta={"sentences": 4},
    )
    # doc.images is [u0, u2, u1]: u0 → d., u2 → a., u1 → a.
    # (two images before one sentence keep image_info order)
    placed = scoring.place_images(doc, [3, 0, 0])
    assert _order(placed) == ["u1", "u2", "a.", "b.", "c.", "u0", "d."]
    assert placed.meta == doc.meta and placed.id == "d"
    assert _order(scoring.place_images(doc, [None, 2, None])) == ["a.", "b.", "u2", "c.", "d."]
    assert _order(scoring.place_images(doc, [None, None, None])) == ["a.", "b.", "c.", "d."]
    for bad in ([0, 1], [0, 1, 4]):
        try:
            scoring.place_images(doc, bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad} was accepted")
