"""Smoke test of ``manage.py bench agents`` at a tiny scale: the client's runs/s beside the raw
HTTP append and the resume packet latencies print, and the scratch database is dropped."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

pytestmark = pytest.mark.django_db(transaction=True)


def test_bench_agents_prints_client_runs_and_packet_latency():
    """Run as a user would (a separate process with gunicorn, its own scratch database)."""
    if connection.vendor != "postgresql":
        pytest.skip("the agents bench loads by COPY: PostgreSQL only")
    db = connection.settings_dict
    scratch = f"stateboard_bench_agents_{os.getpid()}"
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "stateboard.settings", "SECRET_KEY": "bench", "DB_POOL": "0",
           "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"}
    result = subprocess.run([sys.executable, "manage.py", "bench", "agents", "--scale", "0.002", "--reps", "1",
                             "--duration", "1", "--clients", "2", "--db-name", scratch],
                            cwd=Path(__file__).resolve().parents[2], env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_database WHERE datname = %s", [scratch])
        assert cur.fetchone()[0] == 0
    summary = result.stdout.split("== summary", 1)[1]
    full = re.search(r"full run, Python client over HTTP, 2 clients\s*\| ([\d.,]+) runs/s\s*\| raw append x2 "
                     r"([\d,]+)/s = [\d.,]+ runs/s\s*\| ([\d.]+)x", summary)
    assert full and all(float(x.replace(",", "")) > 0 for x in full.groups()), summary
    for where in ("in-process", "GET over HTTP"):
        line = next(line for line in summary.splitlines() if f"resume packet {where}" in line)
        p50, p95 = (float(x) for x in re.findall(r"[\d.]+", line.split("|")[1])[:2])
        assert 0 < p50 <= p95, line
