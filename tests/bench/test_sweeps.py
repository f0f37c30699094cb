"""The sweeps benchmark runs end to end at a tiny scale: every sweep does its work, and once."""

import io

import pytest

from stateboard.bench import sweeps as bench

pytestmark = pytest.mark.django_db(transaction=True)


def test_bench_sweeps_prints_rates_and_the_longest_batch():
    """Stale claims notified once each, checkpoints pruned to the latest per intent, retention erased."""
    out = io.StringIO()
    figures = bench.run(out=out, scale=0.002)
    text = out.getvalue()
    assert text.count("longest batch (locks held)") == 3, text
    assert "a second sweep marked 0" in text, text
    assert figures["stale"]["notifications"] == figures["stale"]["marked"] == 200, figures
