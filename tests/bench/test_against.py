"""``bench ledger --against REV``: the cost ratios of two releases' figures, and a clear refusal of a revision
git cannot export (the full comparison runs two benches: measured by hand, docs/performance.md)."""

import pytest
from django.core.management import CommandError, call_command

from ledger.ops.bench.against import TARGET_COST, compare


def test_a_rate_costs_before_over_now_and_a_latency_now_over_before():
    before = {"plain1_per_s": 300.0, "decision_big_p95_ms": 6.0, "append_big": 300.0, "cp1_per_s": 0}
    now = {"plain1_per_s": 250.0, "decision_big_p95_ms": 6.3, "append_big": 290.0, "cp1_per_s": 200.0}
    report = compare(before, now, "abc1234")
    assert report.figures["plain1_per_s"]["cost"] == pytest.approx(1.2)
    assert report.figures["decision_big_p95_ms"]["cost"] == pytest.approx(1.05)
    assert "cp1_per_s" not in report.figures  # a figure missing from either run is left out, not divided by
    verdicts = {row.figure: row.verdict for row in report.rows}
    assert verdicts["append, service layer, plain, 1 client"] == "MISSES"
    assert verdicts["recovery decision p95 at 1M events"] == "meets"
    assert all(row.baseline.startswith("abc1234: ") for row in report.rows)
    assert TARGET_COST == 1.1


def test_a_revision_git_cannot_export_is_refused_before_any_database_is_made():
    with pytest.raises(CommandError, match="--against 'no-such-revision': cannot export"):
        call_command("bench", "ledger", "--against", "no-such-revision", "--skip-http")


def test_against_needs_the_load():
    with pytest.raises(CommandError, match="drop --skip-load"):
        call_command("bench", "ledger", "--against", "HEAD", "--skip-load")
