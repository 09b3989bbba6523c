"""Exact summaries of integer values given as ``{value: how many}``: the
distributions in ``stats.json`` (they merge by adding counts, so they do not
depend on the order Beam combines them in)."""

from __future__ import annotations

from typing import Any, Mapping

HISTOGRAM_BINS = 20
HISTOGRAM_MAX_UNIT_BINS = 40


def _value_at(counts: list[tuple[int, int]], rank: int) -> int:
    """The ``rank``-th smallest value (1-based) of a sorted (value, count) list."""
    seen = 0
    for value, count in counts:
        seen += count
        if seen >= rank:
            return value
    raise IndexError(rank)


def histogram_edges(low: int, high: int) -> list[int]:
    """Integer bin edges for values in ``[low, high]``: one bin per value when
    at most 40 values are possible, else 20 bins of equal integer width.

    >>> histogram_edges(1, 4)
    [1, 2, 3, 4, 5]
    >>> histogram_edges(0, 99)
    [0, 5, 10, 15, 20, 25, 30, 35, 40, 45, 50, 55, 60, 65, 70, 75, 80, 85, 90, 95, 100]
    """
    span = high - low + 1
    if span <= HISTOGRAM_MAX_UNIT_BINS:
        width, bins = 1, span
    else:
        width = -(-span // HISTOGRAM_BINS)
        bins = -(-span // width)
    return [low + k * width for k in range(bins + 1)]


def distribution(counts: Mapping[int, int], scale: int = 1) -> dict[str, Any] | None:
    """Exact summary of integer values given as ``{value: how many}``.

    The median is the middle value (the mean of the two middle values for an
    even count); p5 and p95 are nearest-rank percentiles (the smallest value
    with at least 5 % / 95 % of the values at or below it). With ``scale``
    the values are reported divided by it.

    >>> distribution({1: 2, 3: 1, 10: 1})
    ... # doctest: +NORMALIZE_WHITESPACE
    {'count': 4, 'sum': 15, 'mean': 3.75, 'min': 1, 'max': 10, 'median': 2.0, 'p5': 1, 'p95': 10,
     'histogram': {'edges': [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11],
                   'counts': [2, 0, 1, 0, 0, 0, 0, 0, 0, 1]}}
    """
    items = sorted((int(v), int(c)) for v, c in counts.items() if c)
    if not items:
        return None
    n = sum(c for _, c in items)
    total = sum(v * c for v, c in items)
    if n % 2:
        median2 = 2 * _value_at(items, (n + 1) // 2)
    else:
        median2 = _value_at(items, n // 2) + _value_at(items, n // 2 + 1)
    edges = histogram_edges(items[0][0], items[-1][0])
    bins = [0] * (len(edges) - 1)
    width = edges[1] - edges[0]
    for value, count in items:
        bins[(value - edges[0]) // width] += count

    def out(value: int | float):
        return value if scale == 1 else value / scale

    return {
        "count": n,
        "sum": out(total),
        "mean": total / n / scale,
        "min": out(items[0][0]),
        "max": out(items[-1][0]),
        "median": median2 / 2 / scale,
        "p5": out(_value_at(items, max(1, -(-5 * n // 100)))),
        "p95": out(_value_at(items, max(1, -(-95 * n // 100)))),
        "histogram": {"edges": [out(e) for e in edges], "counts": bins},
    }
