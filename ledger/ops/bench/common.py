"""What every benchmark shares: output and the summary table, the scratch database, concurrent
client processes, and the raw psycopg baseline each figure is compared with."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import re
import statistics
import time
import traceback
import uuid
from dataclasses import dataclass, field
from urllib.parse import quote

import psycopg
from django.core.management import call_command
from django.db import connection, connections

from ledger.ops.scratch import connect_kwargs, server_database
from stateboard.stats import percentile

RAW_TABLE = "bench_raw_insert"

__all__ = ["BenchError", "Measure", "Out", "Report", "Row", "median", "percentile"]


class BenchError(Exception):
    """A clear refusal or failure, shown to the user as a CommandError."""


# ---------------------------------------------------------------------------------------------
# output


class Out:
    """Write a line to ``out`` (a stream) and flush it, so progress shows while a bench runs."""

    def __init__(self, out):
        self._out = out

    def __call__(self, text: str = "") -> None:
        self._out.write(text if text.endswith("\n") else text + "\n")
        flush = getattr(self._out, "flush", None)
        if flush:
            flush()


@dataclass
class Row:
    figure: str
    value: str
    baseline: str = ""
    ratio: str = ""
    target: str = ""
    verdict: str = ""


@dataclass
class Report:
    rows: list[Row] = field(default_factory=list)
    figures: dict = field(default_factory=dict)  # machine-readable, for the smoke test and callers

    def add(self, row: Row) -> None:
        self.rows.append(row)

    def table(self) -> list[str]:
        """The rows as an aligned text table, a header first."""
        headers = ("figure", "value", "baseline", "ratio", "target", "verdict")
        table = [headers] + [(r.figure, r.value, r.baseline, r.ratio, r.target, r.verdict) for r in self.rows]
        widths = [max(len(str(row[i])) for row in table) for i in range(len(headers))]
        lines = []
        for n, row in enumerate(table):
            lines.append("  " + " | ".join(str(cell).ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
            if n == 0:
                lines.append("  " + "-+-".join("-" * w for w in widths))
        return lines


def median(values):
    return statistics.median(values) if values else 0.0


def rate(value: float) -> str:
    return f"{value:,.0f}/s"


def ratio(value: float, base: float) -> float:
    return value / base if base else 0.0


def verdict(ok: bool) -> str:
    return "meets" if ok else "MISSES"


def plan_nodes(plan: dict):
    """Every node of an ``EXPLAIN (FORMAT JSON)`` plan, depth first."""
    yield plan
    for child in plan.get("Plans", ()):
        yield from plan_nodes(child)


def loadavg() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


# ---------------------------------------------------------------------------------------------
# the database server and the scratch database


def _db_settings():
    return connections["default"].settings_dict


def raw_connect(dbname: str | None = None, autocommit: bool = False):
    """A plain psycopg connection (no Django) to ``dbname``, by default the one Django uses now."""
    return psycopg.connect(autocommit=autocommit, **connect_kwargs(dbname))


def close_django_connections() -> None:
    """Close every Django connection and its pool (before forking, or switching databases)."""
    for conn in connections.all():
        conn.close()
        close_pool = getattr(conn, "close_pool", None)
        if close_pool is not None:
            close_pool()


def _switch_database(name: str) -> None:
    """Point Django's default connection (every thread's, and the pool) at database ``name``."""
    close_django_connections()
    connections["default"].settings_dict["NAME"] = name


def database_url(name: str) -> str:
    """DATABASE_URL for database ``name`` on the configured server (for a server subprocess)."""
    s = _db_settings()
    auth = quote(s.get("USER") or "", safe="")
    if s.get("PASSWORD"):
        auth += ":" + quote(str(s["PASSWORD"]), safe="")
    host = s.get("HOST") or ""
    port = f":{s['PORT']}" if s.get("PORT") else ""
    return f"postgres://{auth}{'@' if auth else ''}{quote(host, safe='')}{port}/{quote(name, safe='')}"


@contextlib.contextmanager
def scratch_database(name: str, say: Out, keep: bool):
    """Create database ``name`` on the same server (``server_database``: never one that exists), migrate it,
    point Django at it; drop it after. Every benchmark runs in one, so this is where a database other than
    PostgreSQL is refused."""
    if connection.vendor != "postgresql":
        raise BenchError(f"The benchmarks run on PostgreSQL only (the database here is {connection.vendor}). "
                         "Set DATABASE_URL=postgres://USER@HOST:5432/DBNAME; each bench creates its own scratch "
                         f"database ({name!r}) on that server and drops it at the end.")

    original = _db_settings()["NAME"]
    with server_database(name, marker="bench", say=say, keep=keep):  # refuses a database it did not create
        say(f"scratch database {name!r} created on the DATABASE_URL server; migrating ...")
        _switch_database(name)
        try:
            call_command("migrate", verbosity=0, interactive=False)
            yield
        finally:
            _switch_database(original)


# ---------------------------------------------------------------------------------------------
# concurrent clients


@dataclass
class Measure:
    ops: int
    seconds: float
    extra: dict = field(default_factory=dict)
    client_cpu: float = 0.0  # CPU seconds the clients themselves spent in their timed loops

    @property
    def client_cpu_ms(self) -> float:
        """The clients' own CPU per operation: the load generator's share of the machine."""
        return 1000 * self.client_cpu / self.ops if self.ops else 0.0

    @property
    def rate(self) -> float:
        return self.ops / self.seconds if self.seconds > 0 else 0.0


def _client_loop(i: int, prepare, step, duration: float, cleanup, wait) -> tuple:
    """One client: untimed ``prepare``, then ``step`` until ``duration`` has passed;
    (count, start, end, extra, CPU seconds of the timed loop)."""
    ctx = prepare(i)
    wait()
    cpu = time.process_time()
    start = time.perf_counter()
    deadline, done = start + duration, 0
    while True:
        if step(ctx) is False:  # nothing left to do: this client stops early
            now = time.perf_counter()
            break
        done += 1
        now = time.perf_counter()
        if now >= deadline:
            break
    cpu = time.process_time() - cpu
    return done, start, now, (cleanup(ctx) if cleanup is not None else None), cpu


def run_clients(n: int, prepare, step, duration: float, cleanup=None) -> Measure:
    """``n`` clients: ``ctx = prepare(i)`` untimed, then ``step(ctx)`` until ``duration`` has passed
    (or until ``step`` returns False: that step is not counted).

    One client runs in this process; several run as forked processes (each with its own database
    connection), so Python work uses every core as real agents would. All start together (a
    barrier); the rate is all steps over the span from the first start to the last finish.
    ``cleanup(ctx)`` runs untimed and may return counts, summed over the clients into ``extra``.
    """
    if n == 1:
        try:
            done, start, end, extra, cpu = _client_loop(0, prepare, step, duration, cleanup, lambda: None)
        except BaseException:
            raise BenchError("A benchmark client failed:\n" + traceback.format_exc())
        finally:
            close_django_connections()
        return Measure(done, end - start, dict(extra or {}), cpu)

    context = multiprocessing.get_context("fork")
    barrier, results = context.Barrier(n), context.Queue()
    close_django_connections()  # children must not share the parent's connections or pool

    def child(i: int) -> None:
        code = 0
        try:
            results.put(("ok", _client_loop(i, prepare, step, duration, cleanup, lambda: barrier.wait(600))))
        except BaseException:
            barrier.abort()
            results.put(("error", traceback.format_exc()))
            code = 1
        finally:
            close_django_connections()
            results.close()
            results.join_thread()  # flush the queue before leaving without the parent's atexit handlers
            os._exit(code)

    processes = [context.Process(target=child, args=(i,), name=f"bench-{i}") for i in range(n)]
    for process in processes:
        process.start()
    outcomes = [results.get(timeout=900) for _ in processes]
    for process in processes:
        process.join()
    errors = [detail for status, detail in outcomes if status == "error"]
    if errors:
        raise BenchError("A benchmark client failed:\n" + errors[0])
    loops = [detail for _, detail in outcomes]
    extra: dict = {}
    for *_, item, _ in loops:
        for key, value in (item or {}).items():
            extra[key] = extra.get(key, 0) + value
    span = max(loop[2] for loop in loops) - min(loop[1] for loop in loops)
    return Measure(sum(loop[0] for loop in loops), span, extra, sum(loop[4] for loop in loops))


# ---------------------------------------------------------------------------------------------
# the raw baseline: one single-row INSERT per operation into a plain table, plain psycopg


@contextlib.contextmanager
def raw_table(name: str = RAW_TABLE):
    """A plain table for the raw baseline, created in the current database and dropped after."""
    if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", name):
        raise BenchError(f"raw table name {name!r}: use lower-case letters, digits and underscores.")
    with raw_connect(autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {name}")
        conn.execute(f"""CREATE TABLE {name} (
            id bigserial PRIMARY KEY, run uuid NOT NULL, seq integer NOT NULL,
            at timestamptz NOT NULL DEFAULT now(), kind varchar(30) NOT NULL,
            data jsonb NOT NULL, hash varchar(64) NOT NULL)""")
    try:
        yield name
    finally:
        with raw_connect(autocommit=True) as conn:
            conn.execute(f"DROP TABLE IF EXISTS {name}")


class _RawWriter:
    def __init__(self, table: str, autocommit: bool):
        self.table, self.autocommit = table, autocommit
        self.conn, self.run, self.seq = raw_connect(autocommit=autocommit), uuid.uuid4(), 0

    def insert(self) -> None:
        self.seq += 1
        self.conn.execute(f"INSERT INTO {self.table} (run, seq, kind, data, hash) VALUES (%s, %s, %s, %s, %s)",
                          (self.run, self.seq, "proposed", '{"note": "raw"}', "0" * 64))
        if not self.autocommit:
            self.conn.commit()


def measure_raw(clients: int, duration: float, table: str = RAW_TABLE) -> Measure:
    """INSERT + COMMIT per operation, one psycopg connection per client, for ``duration`` seconds."""
    return run_clients(clients, lambda i: _RawWriter(table, autocommit=False), lambda w: w.insert(), duration,
                       lambda w: w.conn.close())


def raw_insert_rate(n: int, table: str = RAW_TABLE) -> float:
    """Rows/s of ``n`` single-row INSERTs on one autocommit psycopg connection (each its own commit),
    in this process and without touching Django's connection."""
    writer = _RawWriter(table, autocommit=True)
    try:
        started = time.perf_counter()
        for _ in range(n):
            writer.insert()
        return n / (time.perf_counter() - started)
    finally:
        writer.conn.close()
