"""Smoke test of ``manage.py bench ledger`` at a tiny scale: figures are printed and positive.

Not a timing assertion. The bench creates (and drops) its own scratch database on the test
PostgreSQL server, so the test database is left as it was.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

pytestmark = pytest.mark.django_db(transaction=True)


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def test_bench_ledger_prints_positive_figures():
    """Run as a user would: a separate process (its clients fork) against this PostgreSQL server."""
    if connection.vendor != "postgresql":
        pytest.skip("the ledger bench runs on PostgreSQL only")
    db = connection.settings_dict
    scratch = f"stateboard_bench_test_{os.getpid()}"
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "stateboard.settings", "SECRET_KEY": "bench", "DB_POOL": "0",
           "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"}
    result = subprocess.run([sys.executable, "manage.py", "bench", "ledger", "--scale", "0.001", "--reps", "2",
                             "--duration", "0.3", "--db-name", scratch],
                            cwd=Path(__file__).resolve().parents[2], env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    text = result.stdout

    # The scratch database is gone.
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_database WHERE datname = %s", [scratch])
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
