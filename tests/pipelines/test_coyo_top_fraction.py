"""COYO's --top-fraction: VILA's ranking by clip_similarity_vitb32 + vitl14,
global and deterministic, before any download."""

import apache_beam as beam
import pytest
from apache_beam.testing.util import assert_that, equal_to

from corpora.record import Document
from corpora.sources.filters import coyo_clip_sum
from pipelines.selection import TopFraction
from tests.pipelines.direct import direct_pipeline

pytestmark = pytest.mark.slow

#  id          vitb32  vitl14    sum (binary fractions, so equal sums are exactly equal)
TABLE = [
    ("coyo-1", 0.25, 0.375),  # 0.625
    ("coyo-2", 0.3125, 0.4375),  # 0.75
    ("coyo-3", 0.125, 0.5),  # 0.625 (ties coyo-1; a later id)
    ("coyo-4", 0.1875, 0.25),  # 0.4375
    ("coyo-5", 0.375, 0.5),  # 0.875
    ("coyo-6", 0.25, 0.3125),  # 0.5625
    ("coyo-7", 0.375, 0.25),  # 0.625 (ties coyo-1 and coyo-3)
    ("coyo-8", None, 0.3125),  # no score: dropped with its own reason
]


def _row(rid, b32, l14):
    return Document(
        rid, "coyo", (), meta={"clip_similarity_vitb32": b32, "clip_similarity_vitl14": l14}
    )


@pytest.mark.parametrize("workers", [1, 2])
def test_top_fraction_keeps_exactly_the_expected_ids(workers):
    with direct_pipeline(workers) as p:
        rows = p | beam.Create([_row(*r) for r in TABLE])
        selected = rows | TopFraction(coyo_clip_sum, 0.5)
        # 7 scored rows, k = floor(0.5 * 7 + 0.5) = 4: coyo-5, coyo-2,
        # then the 0.65 ties in id order
        assert_that(
            selected.kept | "KeptIds" >> beam.Map(lambda d: d.id),
            equal_to(["coyo-5", "coyo-2", "coyo-1", "coyo-3"]),
            label="kept",
        )
        assert_that(
            selected.dropped | "DropPairs" >> beam.Map(lambda d: (d.record_id, d.reason)),
            equal_to(
                [
                    ("coyo-7", "below_top_fraction"),
                    ("coyo-4", "below_top_fraction"),
                    ("coyo-6", "below_top_fraction"),
                    ("coyo-8", "below_top_fraction_missing_score"),
                ]
            ),
            label="dropped",
        )
