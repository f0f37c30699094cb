"""`manage.py up` on the embedded defaults: a newcomer with no servers gets a working product."""

import os
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_up_migrates_seeds_and_serves_on_sqlite(tmp_path):
    """With no DATABASE_URL/broker configured: SQLite + file broker, web/worker/beat, /healthz 200, a demo pass."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "DJANGO_SETTINGS_MODULE")}
    env["STATEBOARD_VAR_DIR"] = str(tmp_path)
    result = subprocess.run([sys.executable, "manage.py", "up", "--check", "--port", str(_free_port())],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "/healthz answered 200" in output
    assert "password 'stateboard-demo'" in output and "demo check: every promised fault produced" in output
    assert (tmp_path / "stateboard.sqlite3").exists()
    # The embedded database guards every guarded model too: SQLite triggers generated from the same
    # pgtrigger declarations as PostgreSQL's, checked for each (model, operation), and tried on rows.
    probe = ("from django.db import connection\n"
             "from stateboard.db import guarded_operations, sqlite_trigger_name\n"
             "names = {r[0] for r in connection.cursor().execute(\"SELECT name FROM sqlite_master WHERE type='trigger'\")}\n"
             "for uri, table, op in guarded_operations():\n"
             "    print('GUARDED' if sqlite_trigger_name(uri, op) in names else 'MISSING', uri, op)\n"
             "for sql in ('UPDATE ledger_ledgerevent SET actor = 1', 'DELETE FROM ledger_ledgerevent',\n"
             "            'UPDATE knowledge_claim SET statement = 1', 'DELETE FROM knowledge_claim'):\n"
             "    try:\n"
             "        connection.cursor().execute(sql)\n"
             "        print('ALLOWED', sql)\n"
             "    except Exception as exc:\n"
             "        print('REFUSED', exc)\n")
    guarded = subprocess.run([sys.executable, "manage.py", "shell", "-c", probe], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=120)
    out = guarded.stdout + guarded.stderr
    assert guarded.stdout.count("REFUSED") == 4 and "ALLOWED" not in out, out
    assert "MISSING" not in out and out.count("GUARDED") >= 12, out
