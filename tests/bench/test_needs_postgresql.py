"""Every benchmark refuses a database other than PostgreSQL at once, with one clear message
(``common.scratch_database``, which they all go through), and writes nothing."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow  # a manage.py process per benchmark


@pytest.mark.parametrize("target", ["ledger", "knowledge", "sweeps", "pages", "agents", "instructions"])
def test_a_bench_on_sqlite_is_refused_with_the_way_to_postgresql(target, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(DJANGO_SETTINGS_MODULE="stateboard.settings", SECRET_KEY="bench", STATEBOARD_VAR_DIR=str(tmp_path))
    result = subprocess.run([sys.executable, "manage.py", "bench", target], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "The benchmarks run on PostgreSQL only (the database here is sqlite)" in result.stderr
    assert "DATABASE_URL=postgres://" in result.stderr
    assert "migrating" not in result.stdout
