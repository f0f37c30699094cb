"""Smoke test of ``manage.py bench pages`` at a tiny scale: every page's figures print, and the
scratch database is dropped. Not a timing assertion."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

pytestmark = pytest.mark.django_db(transaction=True)


def test_bench_pages_prints_every_page():
    """Run as a user would (a separate process, its own scratch database on this PostgreSQL server)."""
    if connection.vendor != "postgresql":
        pytest.skip("the pages bench loads by COPY: PostgreSQL only")
    db = connection.settings_dict
    scratch = f"stateboard_bench_pages_{os.getpid()}"
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "stateboard.settings", "SECRET_KEY": "bench", "DB_POOL": "0",
           "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"}
    result = subprocess.run([sys.executable, "manage.py", "bench", "pages", "--scale", "0.001", "--db-name", scratch],
                            cwd=Path(__file__).resolve().parents[2], env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_database WHERE datname = %s", [scratch])
        assert cur.fetchone()[0] == 0
    summary = result.stdout.split("== summary", 1)[1]
    for page in ("runs list", "run detail, 500 events", "approvals inbox", "compare", "reports"):
        line = next(line for line in summary.splitlines() if line.strip().startswith(page + ":"))
        p50, p95, statements = (float(x) for x in re.findall(r"([\d.]+)(?: ms)?", line.split("|")[1])[:3])
        assert 0 < p50 <= p95 and statements >= 1, line
    assert re.search(r"run detail p95, 2,000 events\s*\| [\d.]+ ms\s*\| 50 events [\d.]+ ms\s*\| [\d.]+x", summary)
