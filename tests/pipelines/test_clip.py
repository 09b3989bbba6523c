"""The CLIP stage (RunInference + selection) inside real Beam pipelines, 1 and 2 workers."""

from __future__ import annotations

import glob
import os

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.testing.util import assert_that, equal_to

from corpora import clip
from pipelines.clip import ClipStage, clip_score
from tests.clip_model import TINY_NAME, direct_scores, pair, sample_pairs, tiny_clip  # noqa: F401
from tests.pipelines.direct import direct_pipeline

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::UserWarning")]


@pytest.fixture(scope="module")
def expected(tiny_clip):  # noqa: F811
    docs = sample_pairs()
    scores = direct_scores(
        tiny_clip, [d.images[0].data for d in docs], [d.texts[0].text for d in docs]
    )
    return {doc.id: float(s) for doc, s in zip(docs, scores)}


def inputs() -> list:
    return sample_pairs() + [pair("broken", b"not an image at all", "a caption")]


def run(workers: int, stage: ClipStage, check) -> None:
    with direct_pipeline(workers) as pipeline:
        check(pipeline | beam.Create(inputs()) | stage)


def close_to(expected: dict[str, float]):
    def match(actual):
        got = dict(actual)
        assert sorted(got) == sorted(expected), (sorted(got), sorted(expected))
        for rid, score in got.items():
            assert abs(score - expected[rid]) <= 1e-5, (rid, score, expected[rid])

    return match


@pytest.mark.parametrize("workers", [1, 2])
def test_top_fraction_keeps_exactly_the_highest_scores(tiny_clip, expected, workers, tmp_path):  # noqa: F811
    settings = clip.clip_settings(
        tiny_clip.config_path, tiny_clip.checkpoint, batch_size=3, top_fraction=0.5
    )
    ranked = sorted(expected, key=lambda rid: (-expected[rid], rid))
    top = ranked[:4]

    def check(out):
        assert_that(
            out.docs | beam.Map(lambda d: (d.id, clip_score(d))),
            close_to({rid: expected[rid] for rid in top}),
            label="KeptScores",
        )
        assert_that(
            out.docs | beam.Map(lambda d: d.meta["clip_model"]),
            equal_to([f"{TINY_NAME}/tiny.pt"] * 4),
            label="Model",
        )
        assert_that(
            out.dropped | beam.Map(lambda d: (d.reason, d.record_id)),
            equal_to(
                [("clip_below_top_fraction", rid) for rid in ranked[4:]]
                + [("clip_image_undecodable", "broken")]
            ),
            label="Dropped",
        )
        assert_that(
            out.summary
            | beam.Map(
                lambda s: (
                    s["scored"],
                    s["top_fraction"]["kept"],
                    s["top_fraction"]["cut_id"],
                    s["model"],
                )
            ),
            equal_to([(8, 4, top[-1], f"{TINY_NAME}/tiny.pt")]),
            label="Summary",
        )

    run(workers, ClipStage(settings, str(tmp_path)), check)


def test_min_sim_and_saved_embeddings(tiny_clip, expected, tmp_path):  # noqa: F811
    ordered = sorted(expected.values())
    minimum = (ordered[2] + ordered[3]) / 2  # keeps the 5 highest
    settings = clip.clip_settings(
        tiny_clip.config_path,
        tiny_clip.checkpoint,
        batch_size=3,
        min_sim=minimum,
        save_embeddings=True,
    )
    kept = sorted(rid for rid, s in expected.items() if s >= minimum)
    assert len(kept) == 5

    def check(out):
        assert_that(out.docs | beam.Map(lambda d: d.id), equal_to(kept), label="Kept")
        assert_that(
            out.dropped | beam.Map(lambda d: d.reason),
            equal_to(["clip_similarity_below_min"] * 3 + ["clip_image_undecodable"]),
            label="Dropped",
        )
        assert_that(
            out.summary
            | beam.Map(
                lambda s: (
                    s["scored"],
                    s["min_sim"],
                    s["top_fraction"],
                    sum(f["rows"] for f in s["embeddings"]),
                )
            ),
            equal_to([(8, minimum, None, 8)]),
            label="Summary",
        )

    run(1, ClipStage(settings, str(tmp_path), rows_per_file=3), check)  # 8 rows → 3 files
    files = sorted(glob.glob(os.path.join(tmp_path, "clip-embeddings-*.parquet")))
    assert [os.path.basename(f) for f in files] == [
        f"clip-embeddings-00000{i}.parquet" for i in range(3)
    ]
    tables = [pq.read_table(f) for f in files]
    for table in tables:
        assert table.column("id").to_pylist() == sorted(table.column("id").to_pylist())
        assert table.schema.metadata[b"clip_model"] == f"{TINY_NAME}/tiny.pt".encode()
    table = pa.concat_tables(tables).sort_by("id")
    assert table.column("id").to_pylist() == sorted(expected)  # every scored record, kept or not
    images = np.array(table.column("image_embedding").to_pylist())
    texts = np.array(table.column("text_embedding").to_pylist())
    np.testing.assert_allclose(
        np.einsum("nd,nd->n", images, texts), [expected[r] for r in sorted(expected)], atol=1e-5
    )


def test_document_stage_re_places_images_and_removes_those_below_min_sim(tiny_clip):  # noqa: F811
    from corpora.record import Document, ImageChunk, TextChunk
    from pipelines.clip import DocumentClipStage
    from tests.clip_model import CAPTIONS, SAMPLE_IMAGES, jpeg

    images = [jpeg(path) for path in SAMPLE_IMAGES[:3]]
    docs = [
        Document(
            f"d{k}",
            "mmc4",
            (
                ImageChunk(f"u{k}0", data=images[0], meta={"image_index": 0}),
                TextChunk(CAPTIONS[k]),
                ImageChunk(f"u{k}1", data=images[(k + 1) % 3], meta={"image_index": 1}),
                TextChunk(CAPTIONS[k + 1]),
                TextChunk(CAPTIONS[k + 2]),
            ),
        )
        for k in range(3)
    ] + [Document("t", "mmc4", (TextChunk("only text"),))]
    settings = clip.clip_settings(tiny_clip.config_path, tiny_clip.checkpoint, batch_size=2)
    model = clip.load_clip(settings)
    core = {doc.id: doc for doc in clip.score_documents(docs, model)}
    scores = sorted(s.scores[clip.SCORE] for doc in core.values() for s in doc.images)
    minimum = (scores[2] + scores[3]) / 2
    expected = {rid: clip.remove_images_below(doc, minimum) for rid, doc in core.items()}
    assert sum(len(doc.images) for doc in expected.values()) == 3

    def order(doc):
        return (
            doc.id,
            tuple(c.text if c.kind == "text" else c.url for c in doc.chunks),
            tuple(sorted((doc.meta.get("images_removed") or {}).items())),
        )

    with direct_pipeline() as pipeline:
        out = (
            pipeline
            | beam.Create(docs)
            | DocumentClipStage(
                clip.clip_settings(
                    tiny_clip.config_path, tiny_clip.checkpoint, batch_size=2, min_sim=minimum
                )
            )
        )
        assert_that(
            out.docs | beam.Map(order),
            equal_to([order(d) for d in expected.values()]),
            label="Docs",
        )
        assert_that(out.dropped, equal_to([]), label="Dropped")
        assert_that(
            out.summary | beam.Map(lambda s: (s["scored"], s["model"], s["min_sim"])),
            equal_to([(6, f"{TINY_NAME}/tiny.pt", minimum)]),
            label="Summary",
        )
