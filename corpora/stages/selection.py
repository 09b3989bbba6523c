"""Global top-fraction selection by score, deterministic and worker-count free.

"Keep the top 30% by CLIP score" (DataComp), "the top 25M of COYO by CLIP
similarity" (VILA) are global decisions: a worker cannot make them from its
own records. Sorting 700M records to make them is wasteful, so selection is
two passes over the scores:

1. **Approximate quantiles.** Every score falls in a bucket of width
   ``resolution`` (``floor(score / resolution)``); the bucket counts are summed
   over all workers into one histogram. Sums do not depend on how records
   were split between workers, so neither does anything derived from them.
   The histogram locates the ``k``-th highest score (``k = floor(fraction * n
   + 0.5)``) to within one bucket: every quantile it reports is within
   ``resolution`` of the exact score quantile (error bound in score, not rank).
2. **Exact cut inside the boundary bucket.** Only the records of the one
   bucket holding the ``k``-th score are gathered, ordered by score
   (highest first) and then by id, and the ``k``-th of the whole order becomes
   the cut ``(score, id)``. A record is kept when it comes before or at the
   cut in that order.

So exactly ``k`` records are kept (ids are unique), ties in score are broken
by id, and the result is the same for 1 worker or 100. The memory the second
pass needs is the size of the boundary bucket, which the histogram knows
before it is gathered.

Example, fraction 0.5 of six records::

    (0.9, "a") (0.7, "b") (0.7, "c") (0.7, "d") (0.2, "e") (0.1, "f")

``k = 3``; the order is a, b, c, d, e, f, so the cut is ``(0.7, "c")``: a, b
and c are kept, d (the same score, a later id), e and f are dropped.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Iterable, Mapping

from corpora.record import Drop

RESOLUTION = 1e-4  # bucket width in score units: 20,000 buckets span a cosine range of [-1, 1]

Histogram = dict[int, int]


def target_count(total: int, fraction: float) -> int:
    """How many of ``total`` records the top ``fraction`` keeps (rounded half up).

    >>> [target_count(10, 0.3), target_count(7, 0.5), target_count(3, 1.0), target_count(5, 0.01)]
    [3, 4, 3, 0]
    """
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must be in [0, 1], got {fraction}")
    return max(0, min(total, math.floor(fraction * total + 0.5)))


def bucket(score: float, resolution: float = RESOLUTION) -> int:
    """The histogram bucket of ``score``: ``floor(score / resolution)``."""
    return math.floor(score / resolution)


def order_key(score: float, record_id: str) -> tuple[float, str]:
    """Selection order: highest score first, ties by id ascending."""
    return (-score, record_id)


def valid_score(score: float | None) -> bool:
    return score is not None and not math.isnan(score) and not math.isinf(score)


def histogram(scores: Iterable[float], resolution: float = RESOLUTION) -> Histogram:
    counts: Histogram = {}
    for score in scores:
        b = bucket(score, resolution)
        counts[b] = counts.get(b, 0) + 1
    return counts


def merge_histograms(histograms: Iterable[Mapping[int, int]]) -> Histogram:
    merged: Histogram = {}
    for counts in histograms:
        for b, n in counts.items():
            merged[b] = merged.get(b, 0) + n
    return merged


@dataclasses.dataclass(frozen=True)
class Boundary:
    """Where the ``keep``-th highest score lies: in ``bucket``, after ``above``
    records of higher buckets; ``need`` more are taken from the bucket."""

    total: int
    keep: int
    bucket: int | None
    above: int
    need: int
    bucket_size: int


def locate_boundary(counts: Mapping[int, int], fraction: float) -> Boundary:
    """The bucket holding the cut for the top ``fraction`` of the histogram.

    >>> locate_boundary({9: 1, 7: 3, 2: 1, 1: 1}, 0.5)
    Boundary(total=6, keep=3, bucket=7, above=1, need=2, bucket_size=3)
    """
    total = sum(counts.values())
    keep = target_count(total, fraction)
    above = 0
    if keep > 0:
        for b in sorted(counts, reverse=True):
            if above + counts[b] >= keep:
                return Boundary(total, keep, b, above, keep - above, counts[b])
            above += counts[b]
    return Boundary(total, keep, None, 0, 0, 0)


@dataclasses.dataclass(frozen=True)
class Cut:
    """The last kept record in selection order; ``None`` fields keep nothing."""

    score: float | None
    record_id: str | None

    def keeps(self, score: float, record_id: str) -> bool:
        if self.score is None or self.record_id is None:
            return False
        return order_key(score, record_id) <= order_key(self.score, self.record_id)


def cut_in_boundary(boundary: Boundary, keys: Iterable[tuple[float, str]]) -> Cut:
    """The cut from the ``(score, id)`` keys of the boundary bucket's records.

    >>> b = locate_boundary({9: 1, 7: 3, 2: 1, 1: 1}, 0.5)
    >>> cut_in_boundary(b, [(0.7, "d"), (0.7, "b"), (0.7, "c")])
    Cut(score=0.7, record_id='c')
    """
    if boundary.bucket is None:
        return Cut(None, None)
    ordered = sorted(keys, key=lambda key: order_key(*key))
    if len(ordered) != boundary.bucket_size:
        raise RuntimeError(
            f"boundary bucket holds {len(ordered)} records, the histogram counted "
            f"{boundary.bucket_size}: scores changed between the two passes"
        )
    score, record_id = ordered[boundary.need - 1]
    return Cut(score, record_id)


def quantiles(
    counts: Mapping[int, int], probabilities: Iterable[float], resolution: float = RESOLUTION
) -> dict[str, float]:
    """Approximate score quantiles from the histogram, each within ``resolution``.

    A quantile is reported as the midpoint of its bucket.

    >>> quantiles({0: 2, 5: 2}, [0.25, 0.75], resolution=0.1)
    {'0.25': 0.05, '0.75': 0.55}
    """
    total = sum(counts.values())
    ordered = sorted(counts.items())
    result = {}
    for p in probabilities:
        rank = max(1, math.ceil(p * total))
        seen = 0
        for b, n in ordered:
            seen += n
            if seen >= rank:
                result[f"{p:g}"] = round((b + 0.5) * resolution, 10)
                break
    return result


def select_top_fraction(
    items: Iterable[tuple[float, str]], fraction: float, resolution: float = RESOLUTION
) -> list[str]:
    """The ids the two passes keep, for records held in memory (same rule as the pipeline).

    >>> scored = [(0.9, "a"), (0.7, "d"), (0.7, "b"), (0.2, "e"), (0.7, "c"), (0.1, "f")]
    >>> select_top_fraction(scored, 0.5)
    ['a', 'b', 'c']
    """
    items = list(items)
    boundary = locate_boundary(histogram((s for s, _ in items), resolution), fraction)
    cut = cut_in_boundary(
        boundary, [(s, i) for s, i in items if bucket(s, resolution) == boundary.bucket]
    )
    kept = sorted((order_key(s, i) for s, i in items if cut.keeps(s, i)))
    return [record_id for _, record_id in kept]


def summary(boundary: Boundary, cut: Cut, fraction: float, resolution: float = RESOLUTION) -> dict:
    """What the manifest records about a selection."""
    return {
        "fraction": fraction,
        "input": boundary.total,
        "kept": boundary.keep,
        "cut_score": cut.score,
        "cut_id": cut.record_id,
        "resolution": resolution,
        "boundary_bucket_size": boundary.bucket_size,
    }


def threshold(doc, score: float | None, minimum: float, reason: str):
    """Keep ``doc`` when ``score >= minimum``; else a :class:`~corpora.record.Drop`
    named ``reason``.

    A record without a usable score is dropped as ``{reason}_missing_score``.
    """
    if not valid_score(score):
        return Drop(f"{reason}_missing_score", doc.id, url=doc.source_url)
    if score < minimum:
        return Drop(reason, doc.id, detail=f"score {score} < {minimum}", url=doc.source_url)
    return doc
