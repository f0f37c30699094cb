"""Smoke test of ``manage.py bench ledger`` at a tiny scale: figures are printed and positive.

Not a timing assertion. The bench creates (and drops) its own scratch database on the test
PostgreSQL server, so the test database is left as it was.
"""

import re

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def test_bench_ledger_prints_positive_figures(bench_command):
    """Run as a user would: a separate process (its clients fork) against this PostgreSQL server."""
    text = bench_command("ledger", "--scale", "0.001", "--reps", "1", "--duration", "0.05", timeout=600)

    summary = text.split("== summary", 1)[1]
    rows = {line.split("|")[0].strip(): [cell.strip() for cell in line.split("|")[1:]]
            for line in summary.splitlines()[1:] if "|" in line}
    expected = [
        "append, service layer, stream, 1 client", "append, service layer, stream, 4 clients",
        "append, service layer, plain (proposed), 1 client", "append, service layer, plain (proposed), 4 clients",
        "checkpoint save + load latest, 1 client", "append, HTTP API, stream, 4 clients",
        "append, HTTP API, plain (proposed), 4 clients",
        "web tier floor: GET /healthz (SELECT 1 + Redis PING), 4 clients",
        "new triggers, 16 intents of one workflow, 4 clients",
    ]
    for figure in expected:
        value, baseline, ratio = rows[figure][:3]
        assert _number(value.removesuffix("/s")) > 0, figure
        assert _number(re.search(r"([\d,.]+)/s", baseline).group(1)) > 0, figure
        assert _number(ratio.removesuffix("x")) > 0, figure

    raw_cpu, http_cpu = (_number(x) for x in re.findall(
        r"[\d.]+", rows["load generator: clients' own CPU per call (raw / HTTP plain)"][0])[:2])
    assert raw_cpu > 0 and http_cpu > 0

    decisions = [name for name in rows if name.startswith("recovery decision p50 / p95 at")]
    assert len(decisions) == 2
    for name in decisions:
        p50, p95 = (_number(x) for x in re.findall(r"[\d.]+", rows[name][0])[:2])
        assert 0 < p50 <= p95
    assert "EXPLAIN of the decision's read path" in text
    assert re.search(r"Index (Only )?Scan", text)
