"""Small statistics shared by the metrics and the benchmarks."""

from __future__ import annotations


def percentile(values, q: float) -> float | None:
    """The ``q`` quantile (0..1) of ``values``: the sample at rank round(q * (n - 1)) of the sorted
    values, no interpolation; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]
