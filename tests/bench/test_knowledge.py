"""The knowledge benchmark runs end to end at a tiny scale and leaves nothing behind."""

import io

import pytest

from knowledge.models import Claim, ClaimHead, GateDecision
from ledger.ops.bench import knowledge as bench

pytestmark = [pytest.mark.slow, pytest.mark.django_db]


def test_bench_prints_the_figures_and_cleans_up():
    """Proposal rate, retrieval percentiles and plans, reconcile; then no bench rows remain."""
    out = io.StringIO()
    bench.run(out=out, scale=0.001)
    text = out.getvalue()
    for figure in ("claims/s", "INSERT+COMMIT", "p50", "p95", "entries/s", "cleaned up bench data"):
        assert figure in text
    # At this size the planner may prefer a scan; the plans are only meaningful at scale 1.
    assert text.count("history scanned:") == 2
    assert not Claim.objects.filter(key__startswith="bench.").exists()
    assert not ClaimHead.objects.filter(key__startswith="bench.").exists()
    assert not GateDecision.objects.filter(key__startswith="bench.").exists()
