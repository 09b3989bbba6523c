"""TopFraction and AtLeast inside real Beam pipelines, with 1 and 2 workers."""

from __future__ import annotations

import random

import apache_beam as beam
import pytest
from apache_beam.testing.util import assert_that, equal_to

from corpora.record import Document
from pipelines.selection import AtLeast, TopFraction
from tests.pipelines.direct import direct_pipeline

# 20 records, scores with ties (0.5 five times, 0.3 four times) across buckets.
SCORES = {
    f"r{i:02d}": s
    for i, s in enumerate(
        [
            0.9,
            0.5,
            0.5,
            0.1,
            0.5,
            0.3,
            0.7,
            0.5,
            0.3,
            0.2,
            0.3,
            0.5,
            0.8,
            0.3,
            0.05,
            0.6,
            0.4,
            0.0,
            0.65,
            0.45,
        ]
    )
}


def score(doc: Document) -> float | None:
    return doc.meta.get("score")


def docs() -> list[Document]:
    records = [
        Document(id=rid, corpus="test", chunks=(), meta={"score": s}) for rid, s in SCORES.items()
    ]
    records.append(Document(id="unscored", corpus="test", chunks=()))
    random.Random(7).shuffle(records)
    return records


def run(workers: int, build) -> None:
    with direct_pipeline(workers) as pipeline:
        build(pipeline | beam.Create(docs()))


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_top_fraction_keeps_exactly_the_top_ids_ties_by_id(workers):
    # top 0.4 of 20 scored = 8: 0.9 0.8 0.7 0.65 0.6 0.5(r01) 0.5(r02) 0.5(r04);
    # r07 and r11 (0.5) are cut by id.
    expected = ["r00", "r12", "r06", "r18", "r15", "r01", "r02", "r04"]

    def build(records):
        selected = records | TopFraction(score, 0.4, reason="below_top")
        assert_that(selected.kept | beam.Map(lambda d: d.id), equal_to(expected), label="Kept")
        assert_that(
            selected.dropped | beam.Map(lambda d: (d.reason, d.record_id)),
            equal_to(
                [("below_top", rid) for rid in sorted(set(SCORES) - set(expected))]
                + [("below_top_missing_score", "unscored")]
            ),
            label="Dropped",
        )
        assert_that(
            selected.summary
            | beam.Map(lambda s: (s["input"], s["kept"], s["cut_score"], s["cut_id"])),
            equal_to([(20, 8, 0.5, "r04")]),
            label="Summary",
        )

    run(workers, build)


@pytest.mark.slow
def test_at_least_keeps_scores_at_or_above_the_minimum():
    def build(records):
        kept, dropped = records | AtLeast(score, 0.5, "too_low")
        assert_that(
            kept | beam.Map(lambda d: d.id),
            equal_to([rid for rid, s in SCORES.items() if s >= 0.5]),
            label="Kept",
        )
        assert_that(
            dropped | beam.Map(lambda d: d.reason),
            equal_to(
                ["too_low"] * sum(s < 0.5 for s in SCORES.values()) + ["too_low_missing_score"]
            ),
            label="Dropped",
        )

    run(1, build)
