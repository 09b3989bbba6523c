"""Beam wrappers for score selection: a global top fraction and a minimum.

The rule lives in :mod:`corpora.stages.selection`; here the two passes become a
histogram combined over all workers, the boundary bucket gathered in one
place, and a routing ParDo with the cut as a side input.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import apache_beam as beam
from apache_beam.metrics import Metrics

from corpora.record import Document, Drop
from corpora.stages import selection
from pipelines.transforms import DROPPED, NAMESPACE, record_batches, route_result

ScoreFn = Callable[[Document], "float | None"]


class HistogramFn(beam.CombineFn):
    """Bucket counts summed over workers: the same whatever the split."""

    def create_accumulator(self) -> selection.Histogram:
        return {}

    def add_input(self, counts: selection.Histogram, b: int) -> selection.Histogram:
        counts[b] = counts.get(b, 0) + 1
        return counts

    def merge_accumulators(self, accumulators) -> selection.Histogram:
        return selection.merge_histograms(accumulators)

    def extract_output(self, counts: selection.Histogram) -> selection.Histogram:
        return counts


class _Score(beam.DoFn):
    def __init__(self, score: ScoreFn, reason: str):
        self._score = score
        self._reason = reason

    def process(self, doc: Document):
        score = self._score(doc)
        if not selection.valid_score(score):
            yield route_result(
                Drop(f"{self._reason}_missing_score", doc.id, url=doc.source_url), "select"
            )
        else:
            yield float(score), doc


class _Route(beam.DoFn):
    def __init__(self, reason: str):
        self._reason = reason

    def process(self, scored: tuple[float, Document], cut: selection.Cut):
        score, doc = scored
        if cut.keeps(score, doc.id):
            Metrics.counter(NAMESPACE, f"{self._reason}.kept").inc()
            yield doc
        else:
            yield route_result(
                Drop(
                    self._reason,
                    doc.id,
                    url=doc.source_url,
                    detail=f"score {score} after cut ({cut.score}, {cut.record_id})",
                ),
                "select",
            )


class Selected(NamedTuple):
    kept: beam.PCollection
    dropped: beam.PCollection
    summary: beam.PCollection  # one dict, for the manifest


class TopFraction(beam.PTransform):
    """Keep the top ``fraction`` of documents by ``score(doc)`` over the whole
    PCollection; drop the rest as ``reason``. Ties are broken by id, so the
    kept set does not depend on the number of workers.
    """

    def __init__(
        self,
        score: ScoreFn,
        fraction: float,
        reason: str = "below_top_fraction",
        resolution: float = selection.RESOLUTION,
    ):
        super().__init__()
        if not 0.0 < fraction <= 1.0:
            raise ValueError(f"fraction must be in (0, 1], got {fraction}")
        self._score = score
        self._fraction = fraction
        self._reason = reason
        self._resolution = resolution

    def expand(self, docs: beam.PCollection) -> Selected:
        resolution, fraction = self._resolution, self._fraction
        scored = docs | "Score" >> beam.ParDo(_Score(self._score, self._reason)).with_outputs(
            DROPPED, main="scored"
        )
        counts = (
            scored.scored
            | "Bucket" >> beam.Map(lambda item: selection.bucket(item[0], resolution))
            | "Histogram" >> beam.CombineGlobally(HistogramFn())
        )
        boundary = counts | "Boundary" >> beam.Map(selection.locate_boundary, fraction)
        keys = (
            scored.scored
            | "InBoundary"
            >> beam.FlatMap(
                lambda item, b: (
                    [(item[0], item[1].id)]
                    if selection.bucket(item[0], resolution) == b.bucket
                    else []
                ),
                beam.pvalue.AsSingleton(boundary),
            )
            | "Gather" >> beam.combiners.ToList()
        )
        cut = boundary | "Cut" >> beam.Map(selection.cut_in_boundary, beam.pvalue.AsSingleton(keys))
        routed = scored.scored | "Route" >> beam.ParDo(
            _Route(self._reason), beam.pvalue.AsSingleton(cut)
        ).with_outputs(DROPPED, main="kept")
        summary = cut | "Summary" >> beam.Map(
            lambda c, b: selection.summary(b, c, fraction, resolution),
            beam.pvalue.AsSingleton(boundary),
        )
        dropped = (scored[DROPPED], routed[DROPPED]) | "Dropped" >> beam.Flatten()
        return Selected(routed.kept, dropped, summary)


class _AtLeast(beam.DoFn):
    def __init__(self, score: ScoreFn, minimum: float, reason: str):
        self._score = score
        self._minimum = minimum
        self._reason = reason

    def process(self, doc: Document):
        kept = selection.threshold(doc, self._score(doc), self._minimum, self._reason)
        yield route_result(kept, "select")


class AtLeast(beam.PTransform):
    """Keep documents whose ``score(doc) >= minimum``; drop the rest as ``reason``."""

    def __init__(self, score: ScoreFn, minimum: float, reason: str):
        super().__init__()
        self._fn = _AtLeast(score, minimum, reason)

    def expand(self, docs: beam.PCollection):
        result = docs | "AtLeast" >> beam.ParDo(self._fn).with_outputs(DROPPED, main="kept")
        return result.kept, result[DROPPED]


def select_step(stage, batches, build):
    """``select``: the corpus's top fraction by its rank, over every record of
    the build (one by one, batched again after); the cut's summary is
    ``build.outputs["selection"]`` (the manifest's ``top_fraction``)."""
    spec = build.spec
    selected = (
        batches | "UnbatchToSelect" >> beam.FlatMap(lambda batch: batch)
    ) | "TopFraction" >> TopFraction(spec.rank, spec.top_fraction(build.settings))
    build.dropped(stage.name, selected.dropped)
    build.outputs["selection"] = selected.summary
    return selected.kept | "Rebatch" >> record_batches()
