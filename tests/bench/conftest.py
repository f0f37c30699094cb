import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection


@pytest.fixture
def bench_command():
    """Run ``manage.py bench TARGET ARGS`` as a user would (a separate process with its own scratch
    database on this PostgreSQL server); assert it succeeded and dropped the scratch database; its stdout."""

    def run(target: str, *args: str, timeout: int = 300) -> str:
        if connection.vendor != "postgresql":
            pytest.skip(f"the {target} bench runs on PostgreSQL only")
        db = connection.settings_dict
        scratch = f"stateboard_bench_{target}_{os.getpid()}"
        env = {**os.environ, "DJANGO_SETTINGS_MODULE": "stateboard.settings", "SECRET_KEY": "bench", "DB_POOL": "0",
               "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"}
        result = subprocess.run([sys.executable, "manage.py", "bench", target, *args, "--db-name", scratch],
                                cwd=Path(__file__).resolve().parents[2], env=env, capture_output=True, text=True,
                                timeout=timeout)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        with connection.cursor() as cur:
            cur.execute("SELECT count(*) FROM pg_database WHERE datname = %s", [scratch])
            assert cur.fetchone()[0] == 0, f"scratch database {scratch} left behind"
        return result.stdout

    return run
