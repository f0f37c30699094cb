"""The sweeps benchmark runs end to end at a tiny scale: every sweep does its work, and once."""

import io

import pytest

from ledger.ops.bench import sweeps as bench

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_bench_sweeps_prints_rates_and_the_longest_batch():
    """Stale claims notified once each, checkpoints pruned to the latest per intent, retention erased."""
    out = io.StringIO()
    figures = bench.run(out=out, scale=0.002)
    text = out.getvalue()
    assert text.count("longest batch (locks held)") == 3, text
    assert "a second sweep marked 0" in text, text
    assert figures["stale"]["notifications"] == figures["stale"]["marked"] == 200, figures
    assert figures["leases"]["service"]["distinct_leased"] == figures["leases"]["raw"]["leases"] == 20, figures


def test_bench_leases_leases_every_queued_run_once():
    """4 agent processes lease all 40 queued runs, each once; the raw SKIP LOCKED baseline takes all 40 rows."""
    from django.db import connection
    from django.utils import timezone

    from ledger.ops.bench import leases

    service = leases.measure_service(40, 4, tag="smoke", now=timezone.now())
    raw = leases.measure_raw(40, 4)
    assert service["leases"] == service["distinct_leased"] == 40, service
    assert raw["leases"] == 40 and raw["rate"] > 0 and service["rate"] > 0, raw
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s)", [leases.RAW_QUEUE])
        assert cursor.fetchone()[0] is None  # the scratch table is dropped
