"""``manage.py bench`` drops only a database it created in this run under a name carrying ``bench``
(``ledger.ops.scratch``): an existing database, the configured one or an unmarked name is refused, untouched."""

import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from django.db import connection

from ledger.ops.scratch import connect_kwargs

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.django_db]  # a manage.py process per case


def _bench(db_name: str, configured: str | None = None) -> subprocess.CompletedProcess:
    db = connection.settings_dict
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "stateboard.settings", "SECRET_KEY": "bench", "DB_POOL": "0",
           "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/"
                           f"{configured or db['NAME']}"}
    return subprocess.run([sys.executable, "manage.py", "bench", "sweeps", "--scale", "0.001", "--db-name", db_name],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def _rows(db_name: str) -> list:
    with psycopg.connect(**connect_kwargs(db_name)) as conn:
        return conn.execute("SELECT note FROM kept").fetchall()


@pytest.fixture
def postgres_admin():
    if connection.vendor != "postgresql":
        pytest.skip("the benchmarks run on PostgreSQL only")
    with psycopg.connect(autocommit=True, **connect_kwargs("postgres")) as admin:
        yield admin


def test_bench_refuses_a_database_that_exists_and_leaves_it_as_it_was(postgres_admin):
    name = f"stateboard_bench_taken_{os.getpid()}"
    postgres_admin.execute(f"CREATE DATABASE {name}")
    try:
        with psycopg.connect(**connect_kwargs(name)) as conn:
            conn.execute("CREATE TABLE kept (note text)")
            conn.execute("INSERT INTO kept VALUES ('not the bench''s')")
        result = _bench(name)
        assert result.returncode == 1, result.stdout[-2000:]
        assert f"Database {name!r} already exists" in result.stderr and "migrating" not in result.stdout
        assert _rows(name) == [("not the bench's",)]
    finally:
        postgres_admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.mark.parametrize(("which", "refusal"), [("configured", "must not be the configured one"),
                                                 ("unmarked", "'bench' as a word")])
def test_bench_refuses_the_configured_database_and_a_name_without_its_marker(postgres_admin, which, refusal):
    name = f"stateboard_bench_own_{os.getpid()}" if which == "configured" else f"stateboard_scratch_{os.getpid()}"
    result = _bench(name, configured=name if which == "configured" else None)
    assert result.returncode == 1, result.stdout[-2000:]
    assert refusal in result.stderr and "migrating" not in result.stdout
    assert not postgres_admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchall()
