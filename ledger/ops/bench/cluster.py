"""``bench … --private-cluster``: the bench on a PostgreSQL cluster of its own, so PostgreSQL's own figures
per statement (``pg_stat_statements``, which must be preloaded at the server's start) can be read without
touching the shared server's configuration, and what its backends wait on (``pg_stat_activity``, sampled).

The cluster is made with the installed server's ``initdb`` in a temporary folder, started on a free port of
127.0.0.1 with the server's defaults (fsync and synchronous commit on, as a deployment's), and removed at the
end. Run as root, ``initdb`` and the server run as the ``postgres`` system user (PostgreSQL refuses root).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import threading
from collections import Counter

import psycopg
from django.db import connections

from ledger.ops.bench.common import BenchError, close_django_connections

PRELOAD = ("-c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all "
           "-c pg_stat_statements.track_planning=on -c max_connections=200")
SAMPLE_EVERY = 0.05  # seconds between two looks at what the backends wait on


def _bindir() -> str:
    """The server's programs: ``pg_config --bindir``, else the newest of Debian's ``/usr/lib/postgresql/*/bin``."""
    candidates = []
    if pg_config := shutil.which("pg_config"):
        candidates.append(subprocess.run([pg_config, "--bindir"], capture_output=True, text=True).stdout.strip())
    versions = [v for v in os.listdir("/usr/lib/postgresql") if v.isdigit()] if os.path.isdir("/usr/lib/postgresql") else []
    candidates += [f"/usr/lib/postgresql/{v}/bin" for v in sorted(versions, key=int, reverse=True)]
    for found in candidates:
        if os.path.exists(os.path.join(found, "initdb")):
            return found
    raise BenchError("--private-cluster needs PostgreSQL's server programs (initdb, pg_ctl); none found.")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _as_server_user(command: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return command
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        raise BenchError("--private-cluster run as root needs a 'postgres' system user to run the server as.")
    return ["runuser", "-u", "postgres", "--", *command]


class Statements:
    """PostgreSQL's own figures for the statements run since the last ``reset``, and what the bench database's
    backends waited on meanwhile (sampled every ``SAMPLE_EVERY`` s on a connection of its own)."""

    def __init__(self, connect: dict):
        self.connect = connect
        self.waits: Counter = Counter()
        self.looks = 0
        self._stop = threading.Event()
        self._sampler = None

    def reset(self) -> None:
        with psycopg.connect(autocommit=True, **self.connect) as conn:
            conn.execute("SELECT pg_stat_statements_reset()")
        self.waits.clear()
        self.looks = 0
        self._stop.clear()
        self._sampler = threading.Thread(target=self._sample, name="bench-waits", daemon=True)
        self._sampler.start()

    def _sample(self) -> None:
        with psycopg.connect(autocommit=True, **self.connect) as conn:
            while not self._stop.wait(SAMPLE_EVERY):
                rows = conn.execute(
                    "SELECT coalesce(wait_event_type || ': ' || wait_event, 'on the CPU'), state FROM pg_stat_activity "
                    "WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() AND state <> 'idle' "
                    "AND datname LIKE '%%bench%%'").fetchall()
                self.looks += 1
                self.waits.update(f"{what} ({state})" for what, state in rows)

    def report(self, say, requests: int, top: int = 30) -> None:
        """The statements that took the most of the database's time, per request of the step, and the waits."""
        self._stop.set()
        if self._sampler is not None:
            self._sampler.join(timeout=5)
        with psycopg.connect(autocommit=True, **self.connect) as conn:
            rows = conn.execute(
                "SELECT calls, total_exec_time, total_plan_time, rows, shared_blks_hit + shared_blks_read, "
                "wal_bytes, regexp_replace(query, '\\s+', ' ', 'g') FROM pg_stat_statements "
                "WHERE dbid IN (SELECT oid FROM pg_database WHERE datname LIKE '%%bench%%') "
                "ORDER BY total_exec_time + total_plan_time DESC").fetchall()
        total = sum(r[1] + r[2] for r in rows)
        calls = sum(r[0] for r in rows)
        per = max(requests, 1)
        say(f"          PostgreSQL (pg_stat_statements): {calls} statements, {calls / per:.1f} a request; "
            f"executing and planning {total / per:.2f} ms a request (planning {sum(r[2] for r in rows) / per:.2f})")
        say("            share   calls  per req  mean ms  plan ms  rows/call  blocks/call  WAL B/call  statement")
        for count, exec_ms, plan_ms, nrows, blocks, wal, query in rows[:top]:
            say(f"            {(exec_ms + plan_ms) / max(total, 1e-9):5.0%} {count:>7} {count / per:8.2f} "
                f"{exec_ms / max(count, 1):8.3f} {plan_ms / max(count, 1):8.3f} {nrows / max(count, 1):10.1f} "
                f"{blocks / max(count, 1):12.1f} {float(wal) / max(count, 1):11.0f}  {query[:150]}")
        if self.looks:
            say(f"          what the bench's busy backends were doing ({self.looks} looks, mean busy backends "
                f"{sum(self.waits.values()) / self.looks:.2f}):")
            for what, seen in self.waits.most_common(8):
                say(f"            {seen / self.looks:6.2f}  {what}")


@contextlib.contextmanager
def private_cluster(say):
    """A PostgreSQL cluster of the bench's own for the duration, Django's default connection pointed at it
    (its ``postgres`` database: the scratch database is made there); yields its ``Statements``."""
    bindir = _bindir()
    root = tempfile.mkdtemp(prefix="stateboard-bench-pg-")
    data, log = os.path.join(root, "data"), os.path.join(root, "server.log")
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    settings = connections["default"].settings_dict
    saved = {key: settings.get(key) for key in ("HOST", "PORT", "USER", "PASSWORD", "NAME")}
    started = False
    try:
        say(f"private cluster: initdb in {data} ...")
        _run(_as_server_user([f"{bindir}/initdb", "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8",
                              "--no-sync"]))
        for attempt in range(3):  # a free port another process took before the server bound it: another one
            port = _free_port()
            try:
                _run(_as_server_user([f"{bindir}/pg_ctl", "-D", data, "-l", log, "-w", "-t", "60", "-o",
                                      f"-p {port} -c listen_addresses=127.0.0.1 -k {root} {PRELOAD}", "start"]))
                break
            except BenchError:
                if attempt == 2:
                    raise
        started = True
        close_django_connections()
        settings.update(HOST="127.0.0.1", PORT=str(port), USER="postgres", PASSWORD="", NAME="postgres")
        connect = {"host": "127.0.0.1", "port": str(port), "user": "postgres", "dbname": "postgres"}
        with psycopg.connect(autocommit=True, **connect) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            version = conn.execute("SHOW server_version").fetchone()[0]
        say(f"private cluster: PostgreSQL {version} on 127.0.0.1:{port} with pg_stat_statements (removed at the end)")
        yield Statements(connect)
    finally:
        close_django_connections()
        settings.update(saved)
        if started:
            subprocess.run(_as_server_user([f"{bindir}/pg_ctl", "-D", data, "-m", "fast", "-w", "stop"]),
                           capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


def _run(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        program = os.path.basename(next(part for part in command if part.startswith("/")))
        raise BenchError(f"--private-cluster: {program} failed: {(done.stderr or done.stdout).strip()[-500:]}")
