"""The one percentile helper (metrics and benchmarks)."""

from stateboard.stats import percentile


def test_percentile_picks_the_sample_at_the_rounded_rank():
    """No interpolation: the sorted sample at rank round(q * (n - 1))."""
    assert percentile([5, 1, 4, 2, 3], 0.5) == 3
    assert percentile(list(range(100, 0, -1)), 0.95) == 95
    assert percentile([7.0], 0.95) == 7.0
    assert percentile([1, 2], 0.0) == 1 and percentile([1, 2], 1.0) == 2


def test_percentile_of_no_values_is_none():
    """An empty series has no percentile (the metric reads as null)."""
    assert percentile([], 0.95) is None
