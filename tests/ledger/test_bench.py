"""Smoke test of ``manage.py bench ledger`` at a tiny scale: figures are printed and positive.

Not a timing assertion. The bench creates (and drops) its own scratch database on the test
PostgreSQL server, so the test database is left as it was.
"""

import io
import os
import re

import pytest
from django.core.management import call_command
from django.db import connection

pytestmark = pytest.mark.django_db(transaction=True)


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def test_bench_ledger_prints_positive_figures():
    if connection.vendor != "postgresql":
        pytest.skip("the ledger bench runs on PostgreSQL only")
    original_name = connection.settings_dict["NAME"]
    out = io.StringIO()
    call_command("bench", "ledger", "--scale", "0.001", "--reps", "2", "--duration", "0.3",
                 "--db-name", f"stateboard_bench_test_{os.getpid()}", stdout=out)
    text = out.getvalue()

    # Django points back at the test database, and the scratch database is gone.
    assert connection.settings_dict["NAME"] == original_name
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_database WHERE datname = %s", [f"stateboard_bench_test_{os.getpid()}"])
        assert cur.fetchone()[0] == 0

    summary = text.split("== summary", 1)[1]
    rows = {line.split("|")[0].strip(): [cell.strip() for cell in line.split("|")[1:]]
            for line in summary.splitlines()[1:] if "|" in line}
    expected = [
        "append, service layer, stream, 1 client", "append, service layer, stream, 4 clients",
        "append, service layer, plain (proposed), 1 client", "append, service layer, plain (proposed), 4 clients",
        "checkpoint save + load latest, 1 client", "append, HTTP API, stream, 4 clients",
        "append, HTTP API, plain (proposed), 4 clients",
    ]
    for figure in expected:
        value, baseline, ratio = rows[figure][:3]
        assert _number(value.removesuffix("/s")) > 0, figure
        assert _number(re.search(r"([\d,.]+)/s", baseline).group(1)) > 0, figure
        assert _number(ratio.removesuffix("x")) > 0, figure

    decisions = [name for name in rows if name.startswith("recovery decision p50 / p95 at")]
    assert len(decisions) == 2
    for name in decisions:
        p50, p95 = (_number(x) for x in re.findall(r"[\d.]+", rows[name][0])[:2])
        assert 0 < p50 <= p95
    assert "EXPLAIN of the decision's read path" in text
    assert re.search(r"Index (Only )?Scan", text)
