"""The ledger benchmark behind ``python manage.py bench ledger`` (issue 2, "Benchmark").

It prints figures, it asserts nothing. Everything runs in a scratch database created on the
server of DATABASE_URL and dropped at the end (``keep=True`` keeps it), so the bulk data never
touches a real ledger (whose rows cannot be deleted anyway). Each figure is the median of
``reps`` repetitions and sits beside its baseline measured in the same run:

- raw baseline: psycopg single-row ``INSERT`` + ``COMMIT`` into a scratch table of the scratch
  database (created and dropped here), 1 and N clients;
- event appends through ``services.event_append`` (threads, each with its own connection): a
  realistic stream (each client drives its own runs through a 20-stage workflow: ``started`` /
  ``succeeded`` on non-effect stages, ``started`` / ``succeeded`` / ``verified`` on the 3 effect
  stages, every event with a ``client_event_id``) and a plain append (``proposed`` on an executing
  stage: one event, no transition, no checkpoint);
- the same two streams through the HTTP API served by gunicorn (4 sync workers);
- ``services.checkpoint_save`` + ``selectors.checkpoint_latest`` pairs;
- the recovery decision's read path (workflow + the intent's holding runs + ``recovery_input_gather``
  + ``recovery.recovery_decide``, plain autocommit reads) and, for reference, a full ``run_trigger``
  in a rolled-back transaction, with ~10k and ~1M ledger events loaded by COPY, plus the EXPLAIN of
  the read path's queries at 1M.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import random
import re
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import time
import traceback
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

TARGET_APPEND_MIN = 0.10
TARGET_APPEND_AIM = 0.35
TARGET_CHECKPOINT_MIN = 0.20
TARGET_DECISION_P95_MS = 5.0
TARGET_DECISION_GROWTH = 1.5

FULL_EVENTS = 1_000_000
FULL_RUNS = 100_000
SMALL_EVENTS = 10_000

RAW_TABLE = "bench_raw_insert"
STREAM_WORKFLOW = "bench-stream"
EFFECT_STAGES = ("commit", "push", "deploy")
STREAM_STAGES = (
    "fetch", "parse", "dedupe", "classify", "assess", "plan", "draft", "review", "lint", "commit",
    "build", "test", "package", "push", "stage", "smoke", "approve", "deploy", "monitor", "report",
)
HTTP_WORKERS = 4


class BenchError(Exception):
    """A clear refusal or failure, shown to the user as a CommandError."""


# ---------------------------------------------------------------------------------------------
# output


class _Out:
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


def _median(values):
    return statistics.median(values) if values else 0.0


def _pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    if not ordered:
        return 0.0
    return ordered[max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))]


def _rate(value: float) -> str:
    return f"{value:,.0f}/s"


def _ratio(value: float, base: float) -> float:
    return value / base if base else 0.0


def _verdict(ok: bool) -> str:
    return "meets" if ok else "MISSES"


# ---------------------------------------------------------------------------------------------
# database plumbing


def _db_settings():
    from django.db import connections

    return connections["default"].settings_dict


def _conn_kwargs(dbname: str | None = None) -> dict:
    s = _db_settings()
    kwargs = {"dbname": dbname or s["NAME"], "user": s.get("USER"), "password": s.get("PASSWORD"),
              "host": s.get("HOST"), "port": s.get("PORT")}
    return {k: str(v) for k, v in kwargs.items() if v not in (None, "")}


def _raw_connect(dbname: str | None = None, autocommit: bool = False):
    import psycopg

    return psycopg.connect(autocommit=autocommit, **_conn_kwargs(dbname))


def _admin_connect():
    """An autocommit connection to a maintenance database of the same server."""
    import psycopg

    last = None
    for name in ("postgres", "template1", _db_settings()["NAME"]):
        try:
            return _raw_connect(name, autocommit=True)
        except psycopg.OperationalError as exc:
            last = exc
    raise BenchError(f"Cannot reach the PostgreSQL server of DATABASE_URL: {last}")


def _switch_database(name: str) -> None:
    """Point Django's default connection (every thread's, and the pool) at database ``name``."""
    from django.db import connections

    connections.close_all()
    conn = connections["default"]
    close_pool = getattr(conn, "close_pool", None)
    if close_pool is not None:
        close_pool()
    conn.settings_dict["NAME"] = name


def _database_url(name: str) -> str:
    from urllib.parse import quote

    s = _db_settings()
    auth = quote(s.get("USER") or "", safe="")
    if s.get("PASSWORD"):
        auth += ":" + quote(str(s["PASSWORD"]), safe="")
    host = s.get("HOST") or ""
    port = f":{s['PORT']}" if s.get("PORT") else ""
    return f"postgres://{auth}{'@' if auth else ''}{quote(host, safe='')}{port}/{quote(name, safe='')}"


@contextlib.contextmanager
def scratch_database(name: str, say: _Out, keep: bool):
    """Create database ``name`` on the same server, migrate it, point Django at it; drop it after."""
    from django.core.management import call_command
    from psycopg import sql

    if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", name):
        raise BenchError(f"--db-name {name!r}: use lower-case letters, digits and underscores.")
    original = _db_settings()["NAME"]
    if name == original:
        raise BenchError(f"The scratch database must not be the configured one ({original!r}); "
                         "it is dropped at the end.")
    with _admin_connect() as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    say(f"scratch database {name!r} created on the DATABASE_URL server; migrating ...")
    _switch_database(name)
    try:
        call_command("migrate", verbosity=0, interactive=False)
        yield
    finally:
        _switch_database(original)
        if keep:
            say(f"scratch database {name!r} kept (--keep); drop it with: DROP DATABASE {name};")
        else:
            with _admin_connect() as admin:
                admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
            say(f"scratch database {name!r} dropped")


# ---------------------------------------------------------------------------------------------
# concurrent clients


@dataclass
class Measure:
    ops: int
    seconds: float
    extra: dict = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.ops / self.seconds if self.seconds > 0 else 0.0


def _client_loop(i: int, prepare, step, duration: float, cleanup, wait) -> tuple:
    """One client: untimed ``prepare``, then ``step`` until ``duration`` has passed; (count, start, end, extra)."""
    ctx = prepare(i)
    wait()
    start = time.perf_counter()
    deadline, done = start + duration, 0
    while True:
        step(ctx)
        done += 1
        now = time.perf_counter()
        if now >= deadline:
            break
    return done, start, now, (cleanup(ctx) if cleanup is not None else None)


def _close_django_connections() -> None:
    from django.db import connections

    for conn in connections.all():
        conn.close()
        close_pool = getattr(conn, "close_pool", None)
        if close_pool is not None:
            close_pool()


def run_clients(n: int, prepare, step, duration: float, cleanup=None) -> Measure:
    """``n`` clients: ``ctx = prepare(i)`` untimed, then ``step(ctx)`` until ``duration`` has passed.

    One client runs in this process; several run as forked processes (each with its own database
    connection), so Python work uses every core as real agents would. All start together (a
    barrier); the rate is all steps over the span from the first start to the last finish.
    ``cleanup(ctx)`` runs untimed.
    """
    if n == 1:
        try:
            done, start, end, extra = _client_loop(0, prepare, step, duration, cleanup, lambda: None)
        except BaseException:
            raise BenchError("A benchmark client failed:\n" + traceback.format_exc())
        finally:
            _close_django_connections()
        return Measure(done, end - start, dict(extra or {}))

    import multiprocessing
    import os

    context = multiprocessing.get_context("fork")
    barrier, results = context.Barrier(n), context.Queue()
    _close_django_connections()  # children must not share the parent's connections or pool

    def child(i: int) -> None:
        code = 0
        try:
            results.put(("ok", _client_loop(i, prepare, step, duration, cleanup, lambda: barrier.wait(600))))
        except BaseException:
            barrier.abort()
            results.put(("error", traceback.format_exc()))
            code = 1
        finally:
            _close_django_connections()
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
    for *_, item in loops:
        for key, value in (item or {}).items():
            extra[key] = extra.get(key, 0) + value
    return Measure(sum(done for done, *_ in loops), max(end for _, _, end, _ in loops) - min(s for _, s, _, _ in loops),
                   extra)


# ---------------------------------------------------------------------------------------------
# the raw baseline


def raw_table_create() -> None:
    with _raw_connect(autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {RAW_TABLE}")
        conn.execute(f"""CREATE TABLE {RAW_TABLE} (
            id bigserial PRIMARY KEY, run uuid NOT NULL, seq integer NOT NULL,
            at timestamptz NOT NULL DEFAULT now(), kind varchar(30) NOT NULL,
            data jsonb NOT NULL, hash varchar(64) NOT NULL)""")


def raw_table_drop() -> None:
    with _raw_connect(autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {RAW_TABLE}")


def measure_raw(clients: int, duration: float) -> Measure:
    """Single-row INSERT + COMMIT per operation, one psycopg connection per client."""

    def prepare(i):
        return {"conn": _raw_connect(), "run": uuid.uuid4(), "seq": 0}

    def step(ctx):
        ctx["seq"] += 1
        ctx["conn"].execute(
            f"INSERT INTO {RAW_TABLE} (run, seq, kind, data, hash) VALUES (%s, %s, %s, %s, %s)",
            (ctx["run"], ctx["seq"], "proposed", '{"note": "raw"}', "0" * 64))
        ctx["conn"].commit()

    def cleanup(ctx):
        ctx["conn"].close()

    return run_clients(clients, prepare, step, duration, cleanup)


# ---------------------------------------------------------------------------------------------
# event streams (shared by the service-layer and HTTP clients)


def _iso_now() -> str:
    from django.utils import timezone

    return timezone.now().isoformat()


def stream_bodies(stages=STREAM_STAGES, effect_stages=EFFECT_STAGES):
    """The bodies an agent posts to drive one run through every stage."""
    for stage in stages:
        yield {"client_event_id": uuid.uuid4().hex, "stage": stage, "kind": "started"}
        if stage in effect_stages:
            ref = secrets.token_hex(20)
            yield {"client_event_id": uuid.uuid4().hex, "stage": stage, "kind": "succeeded",
                   "effect": {"system": "git", "operation": stage, "reference": ref}}
            yield {"client_event_id": uuid.uuid4().hex, "stage": stage, "kind": "verified",
                   "effect": {"system": "git", "operation": stage, "reference": ref},
                   "evidence": [{"uri": f"https://ci.example/{stage}/{ref}", "observed_at": _iso_now(),
                                 "digest": "sha256:" + ref}]}
        else:
            yield {"client_event_id": uuid.uuid4().hex, "stage": stage, "kind": "succeeded",
                   "data": {"summary": f"{stage} done", "items": 12}}


CALLS_PER_RUN = sum(3 if s in EFFECT_STAGES else 2 for s in STREAM_STAGES)


def plain_body(stage: str) -> dict:
    return {"client_event_id": uuid.uuid4().hex, "stage": stage, "kind": "proposed",
            "data": {"proposal": "retry the flaky test", "confidence": 0.7}}


class _RunFeed:
    """Bodies for a client's pre-triggered runs; triggers more (timed) if it runs out."""

    def __init__(self, run_ids: list, trigger):
        self.run_ids, self.trigger, self.inline_triggers = list(run_ids), trigger, 0
        self._iter = self._gen()

    def _gen(self):
        while True:
            if self.run_ids:
                run_id = self.run_ids.pop(0)
            else:
                self.inline_triggers += 1
                run_id = self.trigger()
            for body in stream_bodies():
                yield run_id, body

    def next(self):
        return next(self._iter)


def _runs_needed(rate_guess: float, duration: float) -> int:
    return int(math.ceil(rate_guess * duration * 1.5 / CALLS_PER_RUN)) + 2


# ---------------------------------------------------------------------------------------------
# service layer


def stream_workflow():
    from ledger.models import Workflow

    workflow, _ = Workflow.objects.get_or_create(
        slug=STREAM_WORKFLOW,
        defaults={"title": "Bench stream", "stages": list(STREAM_STAGES), "effect_stages": list(EFFECT_STAGES),
                  "approval_stages": [], "lease_seconds": 3600, "max_retries": 3})
    return workflow


def _service_trigger(actor: str) -> str:
    from ledger import services

    run, _ = services.run_trigger(workflow_slug=STREAM_WORKFLOW, inputs={"item": uuid.uuid4().hex},
                                  intent=f"{actor}/{uuid.uuid4().hex[:12]}", env_fingerprint="img:1",
                                  actor=actor)
    assert run.state == "fresh", run.state
    return run.id


def measure_service_stream(clients: int, duration: float, rate_guess: float) -> Measure:
    from ledger import services

    def prepare(i):
        actor = f"agent:bench-svc-{i}"
        runs = [_service_trigger(actor) for _ in range(_runs_needed(rate_guess, duration))]
        return {"actor": actor, "feed": _RunFeed(runs, lambda: _service_trigger(actor))}

    def step(ctx):
        run_id, body = ctx["feed"].next()
        _, created = services.event_append(run_id=run_id, body=body, actor=ctx["actor"])
        assert created

    def cleanup(ctx):
        return {"inline_triggers": ctx["feed"].inline_triggers}

    return run_clients(clients, prepare, step, duration, cleanup)


def measure_service_plain(clients: int, duration: float) -> Measure:
    from ledger import services

    def prepare(i):
        actor = f"agent:bench-plain-{i}"
        run_id = _service_trigger(actor)
        services.event_append(run_id=run_id, body={"stage": STREAM_STAGES[0], "kind": "started"}, actor=actor)
        return {"actor": actor, "run": run_id}

    def step(ctx):
        services.event_append(run_id=ctx["run"], body=plain_body(STREAM_STAGES[0]), actor=ctx["actor"])

    return run_clients(clients, prepare, step, duration)


def checkpoint_payload(run_id) -> dict:
    done = STREAM_STAGES[:4]
    return {
        "stage": STREAM_STAGES[4],
        "state_table": {s: {"status": "succeeded", "summary": f"{s}: 12 items, 0 warnings",
                            "pointer": f"artifact://bench/{run_id}/{s}.json"} for s in done},
        "assertions": [{"stage": s, "pointer": f"artifact://bench/{run_id}/{s}.json",
                        "digest": hashlib.sha256(s.encode()).hexdigest()} for s in done],
        "pending_intents": ["assess the remaining items"],
        "allowed_next_stages": [STREAM_STAGES[4]],
        "retry_count": 0,
        "max_retries": 3,
    }


def measure_checkpoint(clients: int, duration: float) -> Measure:
    from ledger import selectors, services
    from ledger.models import Run

    def prepare(i):
        actor = f"agent:bench-cp-{i}"
        run = Run.objects.get(id=_service_trigger(actor))
        return {"actor": actor, "run": run, "payload": checkpoint_payload(run.id)}

    def step(ctx):
        saved = services.checkpoint_save(run_id=ctx["run"].id, payload=ctx["payload"], actor=ctx["actor"])
        latest = selectors.checkpoint_latest(run=ctx["run"])
        assert latest is not None and latest.id == saved.id

    return run_clients(clients, prepare, step, duration)


# ---------------------------------------------------------------------------------------------
# HTTP API (gunicorn)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def gunicorn_server(db_name: str, say: _Out):
    import requests
    from django.conf import settings

    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    gunicorn = Path(sys.executable).with_name("gunicorn")
    cmd = [str(gunicorn)] if gunicorn.exists() else [sys.executable, "-m", "gunicorn"]
    cmd += ["stateboard.wsgi", "-w", str(HTTP_WORKERS), "-b", f"127.0.0.1:{port}"]
    env = dict(os.environ)
    env.update(DATABASE_URL=_database_url(db_name), DEBUG="0", ALLOWED_HOSTS="127.0.0.1",
               SECRET_KEY=os.environ.get("SECRET_KEY") or secrets.token_urlsafe(50),
               DJANGO_SETTINGS_MODULE="stateboard.settings", LOG_LEVEL="WARNING")
    log = (Path(settings.BASE_DIR) / "var")
    log.mkdir(parents=True, exist_ok=True)
    log_path = log / "bench-gunicorn.log"
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(cmd, cwd=settings.BASE_DIR, env=env, stdout=log_file, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise BenchError(f"gunicorn exited with {proc.returncode}; see {log_path}:\n"
                                 + log_path.read_text(errors="replace")[-2000:])
            try:
                requests.get(base + "/healthz", timeout=5)
                break
            except requests.RequestException:
                if time.monotonic() > deadline:
                    raise BenchError(f"gunicorn did not answer on {base} within 60 s; see {log_path}")
                time.sleep(0.2)
        pool = env.get("DB_POOL", "1")
        say(f"gunicorn up: {' '.join(cmd[-5:])} (DEBUG off, DB_POOL={pool}), log {log_path}")
        yield base
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        say("gunicorn stopped")


class _Http:
    def __init__(self, base: str, token: str):
        import requests

        self.base = base
        self.session = requests.Session()
        self.session.headers.update({"Authorization": f"Token {token}", "Content-Type": "application/json"})

    def post(self, path: str, body: dict, expect=(201,)) -> dict:
        response = self.session.post(self.base + path, data=json.dumps(body), timeout=30)
        if response.status_code not in expect:
            raise BenchError(f"POST {path} answered {response.status_code}: {response.text[:500]}")
        return response.json()

    def trigger(self, name: str) -> str:
        body = {"workflow": STREAM_WORKFLOW, "intent": f"{name}/{uuid.uuid4().hex[:12]}",
                "inputs": {"item": uuid.uuid4().hex}, "env_fingerprint": "img:1"}
        run = self.post("/api/v1/runs/", body)
        if run.get("state") != "fresh":
            raise BenchError(f"HTTP trigger gave state {run.get('state')!r}, expected 'fresh'")
        return run["id"]

    def close(self):
        self.session.close()


def measure_http_stream(base: str, token: str, clients: int, duration: float, rate_guess: float) -> Measure:
    def prepare(i):
        http = _Http(base, token)
        name = f"http-{i}"
        runs = [http.trigger(name) for _ in range(_runs_needed(rate_guess, duration))]
        return {"http": http, "feed": _RunFeed(runs, lambda: http.trigger(name))}

    def step(ctx):
        run_id, body = ctx["feed"].next()
        ctx["http"].post(f"/api/v1/runs/{run_id}/events/", body)

    def cleanup(ctx):
        ctx["http"].close()
        return {"inline_triggers": ctx["feed"].inline_triggers}

    return run_clients(clients, prepare, step, duration, cleanup)


def measure_http_plain(base: str, token: str, clients: int, duration: float) -> Measure:
    def prepare(i):
        http = _Http(base, token)
        run_id = http.trigger(f"http-plain-{i}")
        http.post(f"/api/v1/runs/{run_id}/events/", {"stage": STREAM_STAGES[0], "kind": "started"})
        return {"http": http, "run": run_id}

    def step(ctx):
        ctx["http"].post(f"/api/v1/runs/{ctx['run']}/events/", plain_body(STREAM_STAGES[0]))

    def cleanup(ctx):
        ctx["http"].close()

    return run_clients(clients, prepare, step, duration, cleanup)


# ---------------------------------------------------------------------------------------------
# bulk load for the recovery decision


LOAD_SHAPES = (
    # (stages, effect stages)
    (("discovery", "assessment", "draft", "build", "commit", "push", "deploy", "verify"), ("commit", "push", "deploy")),
    (("collect", "analyze", "draft", "publish", "verify"), ("publish",)),
    (("fetch", "triage", "label", "notify"), ()),
)
LOAD_WORKFLOWS = 20
RUN_COLUMNS = ("id", "workflow_id", "intent", "trigger", "trigger_key", "inputs", "input_fingerprint",
               "policy_version", "env_fingerprint", "state", "decision", "current_stage", "stage_states",
               "triggered_by", "created_at", "updated_at", "ended_at", "decided_at", "retried_at",
               "lease_owner", "lease_expires_at", "event_count", "last_hash")
EVENT_COLUMNS = ("run_id", "seq", "at", "stage", "kind", "actor", "input_fingerprint", "policy_version",
                 "env_fingerprint", "idempotency_key", "effect", "evidence", "reason_code", "data",
                 "client_event_id", "body_digest", "prev_hash", "hash")
CHECKPOINT_COLUMNS = ("workflow_id", "intent", "run_id", "source", "payload", "input_fingerprint",
                      "policy_version", "env_fingerprint", "version_boundary", "created_at", "expires_at")
EFFECT_COLUMNS = ("idempotency_key", "workflow_id", "intent", "input_fingerprint", "stage", "run_id", "status",
                  "system", "operation", "reference", "attempts", "claimed_seq", "last_seq", "created_at",
                  "updated_at")
ENV = "img:2024.06"


@dataclass
class IntentInfo:
    workflow_slug: str
    intent: str
    inputs: dict
    complete_with_effects: bool = False


class BulkLoader:
    """Generates realistic run histories and COPYs them straight into the ledger tables.

    Per intent 1-7 runs (mean 4) over ~90 days; the source version changes between runs with
    probability 0.35 (a new input fingerprint); a run whose fingerprint is complete is a ``noop``;
    otherwise it verifies pending ``unknown`` effects, then passes the remaining stages
    (``started``/``succeeded``, plus ``verified`` on effect stages) or fails at one (on an effect
    stage half the failures are ``unknown``: outcome not observed). Server-style checkpoints after
    the last passed stage (and one midway), effects with their default keys. The hash chain is
    synthetic (SHA-256 over the run, seq, kind and previous hash), not the service's.
    """

    def __init__(self, say: _Out, seed: int = 20240601):
        from django.utils import timezone

        from ledger.models import Workflow

        self.say, self.rng, self.now = say, random.Random(seed), timezone.now()
        self.workflows = []
        for i in range(LOAD_WORKFLOWS):
            stages, effects = LOAD_SHAPES[i % len(LOAD_SHAPES)]
            wf, _ = Workflow.objects.get_or_create(
                slug=f"load-wf-{i:02d}",
                defaults={"title": f"Load {i}", "stages": list(stages), "effect_stages": list(effects),
                          "approval_stages": [], "policy_version": "3"})
            self.workflows.append(wf)
        self.next_intent = 0
        self.intents: list[IntentInfo] = []
        self.totals = {"runs": 0, "events": 0, "checkpoints": 0, "effects": 0}

    # -- generation

    def _intent_rows(self, rows):
        from ledger.services import effect_key_default, input_fingerprint

        rng = self.rng
        idx = self.next_intent
        self.next_intent += 1
        wf = self.workflows[idx % len(self.workflows)]
        stages, effect_stages = list(wf.stages), set(wf.effect_stages)
        intent = f"{wf.slug}/item-{idx:07d}"
        version = 1
        t = self.now - timedelta(days=90) + timedelta(seconds=rng.uniform(0, 60 * 86400))
        fps: dict[str, dict] = {}
        n_runs = rng.randint(1, 7)
        inputs = {}
        complete_with_effects = False
        for k in range(n_runs):
            if k and rng.random() < 0.35:
                version += 1
            inputs = {"source": intent, "version": version, "window": "2024-06"}
            fp = input_fingerprint(workflow_slug=wf.slug, intent=intent, inputs=inputs,
                                   policy_version=wf.policy_version)
            st = fps.setdefault(fp, {"done": {}, "effects": {}, "complete": False})
            t = min(t + timedelta(seconds=rng.uniform(1800, 3 * 86400)), self.now - timedelta(minutes=5))
            run_id = uuid.uuid4()
            events = []  # (stage, kind, reason, data_json, effect_json, evidence_json, idem, agent)

            def system(kind, reason="", data="{}", stage=""):
                events.append((stage, kind, reason, data, None, "[]", "", False))

            system("transition", "", '{"from": "captured", "to": "restore"}')
            checkpoints = []
            if st["complete"]:
                outcome, reason, state = "noop", "verified_effect_same_fingerprint", "noop"
            else:
                outcome, reason, state = "fresh", "no_checkpoint" if not st["done"] else "resume_incomplete_stage", ""
            decision = {"outcome": outcome, "reason_code": reason, "retry_count": 0, "max_retries": 3}
            system("decided", reason, json.dumps(decision))
            system("transition", reason, json.dumps({"from": "compare", "to": outcome}))
            fail_at = None
            if not st["complete"]:
                remaining = [s for s in stages if s not in st["done"]]
                if rng.random() < 0.4:
                    fail_at = rng.randrange(len(remaining))
                passed = 0
                for j, stage in enumerate(remaining):
                    is_effect = stage in effect_stages
                    key = effect_key_default(workflow_slug=wf.slug, intent=intent, fingerprint=fp, stage=stage) \
                        if is_effect else ""
                    if is_effect and st["effects"].get(stage, {}).get("status") == "unknown":
                        events.append((stage, "verified", "", "{}", '{"system": "git"}',
                                       '[{"uri": "https://ci.example/x", "observed_at": "2024-06-01T00:00:00Z"}]',
                                       key, True))
                        st["effects"][stage].update(status="verified", last_seq=len(events))
                        st["done"][stage] = ("verified", run_id, len(events))
                        passed += 1
                        continue
                    events.append((stage, "started", "", "{}", None, "[]", key, True))
                    if is_effect:
                        st["effects"][stage] = {"status": "attempted", "run": run_id, "claimed": len(events),
                                                "last_seq": len(events), "key": key,
                                                "attempts": st["effects"].get(stage, {}).get("attempts", 0) + 1}
                    if j == fail_at:
                        if is_effect and rng.random() < 0.5:
                            events.append((stage, "unknown", "timeout", "{}", None, "[]", key, True))
                            st["effects"][stage].update(status="unknown", last_seq=len(events))
                        else:
                            events.append((stage, "failed", "stage_failed", '{"error": "exit 1"}', None, "[]",
                                           key, True))
                            if is_effect:
                                st["effects"][stage].update(status="failed", last_seq=len(events))
                        break
                    events.append((stage, "succeeded", "", '{"summary": "ok"}',
                                   '{"system": "git", "operation": "push", "reference": "abc123"}' if is_effect
                                   else None, "[]", key, True))
                    if is_effect:
                        events.append((stage, "verified", "", "{}", None,
                                       '[{"uri": "https://ci.example/x", "observed_at": "2024-06-01T00:00:00Z"}]',
                                       key, True))
                        st["effects"][stage].update(status="verified", last_seq=len(events))
                        st["done"][stage] = ("verified", run_id, len(events))
                    else:
                        st["done"][stage] = ("succeeded", run_id, len(events))
                    passed += 1
                    if passed == 3 or j == len(remaining) - 1:
                        checkpoints.append(len(events))
                if fail_at is not None and passed and (not checkpoints or checkpoints[-1] != len(events)):
                    checkpoints.append(len(events))
                if all(s in st["done"] for s in stages):
                    st["complete"], state = True, "completed"
                    system("transition", "all_stages_done", '{"from": "checkpointed", "to": "completed"}')
                else:
                    state = "failed"
                    system("transition", "stage_failed", '{"from": "execute", "to": "failed"}')

            # events
            prev = "0" * 64
            seq_at = {}
            for seq, (stage, kind, reason_code, data, effect, evidence, idem, agent) in enumerate(events, 1):
                at = t + timedelta(seconds=20 * seq)
                seq_at[seq] = at
                digest = hashlib.sha256(f"{prev}{run_id}{seq}{kind}{stage}".encode()).hexdigest()
                rows["events"].append((run_id, seq, at, stage, kind, "agent:loader" if agent else "system", fp,
                                       wf.policy_version, ENV, idem, effect, evidence, reason_code, data,
                                       uuid.uuid4().hex if agent else None, "", prev, digest))
                prev = digest
            # checkpoints (the state after event ``upto``)
            for upto in checkpoints:
                at = seq_at[upto]
                table = {s: {"status": v[0], "pointer": f"ledger:{v[1]}/{v[2]}"} for s, v in st["done"].items()
                         if v[1] != run_id or v[2] <= upto}
                observed = sorted(e["key"] for s, e in st["effects"].items() if s in table)
                payload = {
                    "stage": stage, "retry_count": 0, "max_retries": 3,
                    "allowed_next_stages": [s for s in stages if s not in table][:1],
                    "observed_effects": observed, "state_table": table,
                    "assertions": [{"stage": s, "pointer": e["pointer"], "digest": hashlib.sha256(
                        e["pointer"].encode()).hexdigest()} for s, e in table.items()],
                    "input_fingerprint": fp, "policy_version": wf.policy_version, "env_fingerprint": ENV,
                    "created_at": at.isoformat(), "expires_at": (at + timedelta(days=1)).isoformat(),
                }
                rows["checkpoints"].append((wf.id, intent, run_id, "server", json.dumps(payload), fp,
                                            wf.policy_version, ENV, None, at, at + timedelta(days=1)))
            # the intent's latest run is complete with effects: every read-path query runs for it
            complete_with_effects = st["complete"] and bool(effect_stages)
            end = seq_at[len(events)]
            stage_states = {s: {"status": v[0], "pointer": f"ledger:{v[1]}/{v[2]}"} for s, v in st["done"].items()}
            rows["runs"].append((run_id, wf.id, intent, "schedule", f"schedule:{run_id}", json.dumps(inputs), fp,
                                 wf.policy_version, ENV, state, json.dumps(decision), "",
                                 json.dumps(stage_states), "scheduler", t, end, end, t, None, "agent:loader",
                                 None, len(events), prev))
        for fp_of, st in fps.items():
            for stage, e in st["effects"].items():
                rows["effects"].append((e["key"], wf.id, intent, fp_of, stage, e["run"], e["status"], "git", "push",
                                        "abc123", e["attempts"], e["claimed"], e["last_seq"], self.now, self.now))
        self.intents.append(IntentInfo(wf.slug, intent, inputs, complete_with_effects))

    # -- loading

    def _copy(self, conn, table: str, columns, rows) -> None:
        with conn.cursor() as cur:
            with cur.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)

    def load(self, *, events_target: int, runs_target: int, label: str) -> None:
        """Add intents until about ``runs_target`` more runs are loaded; progress every batch."""
        started = time.perf_counter()
        goal_runs = self.totals["runs"] + runs_target
        goal_events = self.totals["events"] + events_target
        batch_runs = max(50, min(5000, runs_target // 10 or 50))
        last_progress = 0.0
        with _raw_connect() as conn:
            while self.totals["runs"] < goal_runs:
                rows = {"runs": [], "events": [], "checkpoints": [], "effects": []}
                while len(rows["runs"]) < batch_runs and self.totals["runs"] + len(rows["runs"]) < goal_runs:
                    self._intent_rows(rows)
                self._copy(conn, "ledger_run", RUN_COLUMNS, rows["runs"])
                self._copy(conn, "ledger_ledgerevent", EVENT_COLUMNS, rows["events"])
                self._copy(conn, "ledger_checkpoint", CHECKPOINT_COLUMNS, rows["checkpoints"])
                self._copy(conn, "ledger_effect", EFFECT_COLUMNS, rows["effects"])
                conn.commit()
                for key in self.totals:
                    self.totals[key] += len(rows[key])
                elapsed = time.perf_counter() - started
                if elapsed - last_progress >= 5 or self.totals["runs"] >= goal_runs:
                    last_progress = elapsed
                    self.say(f"  [{label}] loaded {self.totals['events']:,} / ~{goal_events:,} events, "
                             f"{self.totals['runs']:,} / {goal_runs:,} runs, {self.totals['checkpoints']:,} "
                             f"checkpoints, {self.totals['effects']:,} effects ({elapsed:.1f} s)")
            with conn.cursor() as cur:
                cur.execute("ANALYZE ledger_run, ledger_ledgerevent, ledger_checkpoint, ledger_effect")
            conn.commit()


# ---------------------------------------------------------------------------------------------
# the recovery decision


def decision_read_path(workflow_slug: str, intent: str, inputs: dict, env: str = ENV):
    """What a trigger reads to decide (no lock, no write): workflow, holding runs, L2/L3, decision."""
    from django.utils import timezone

    from ledger import recovery, services
    from ledger.models import HOLDING_STATES, Run, Workflow

    workflow = Workflow.objects.get(slug=workflow_slug)
    fp = services.input_fingerprint(workflow_slug=workflow.slug, intent=intent, inputs=inputs,
                                    policy_version=workflow.policy_version)
    others = list(Run.objects.filter(workflow=workflow, intent=intent, state__in=(*HOLDING_STATES, "escalated")))
    inp, _ = services.recovery_input_gather(workflow=workflow, intent=intent, fingerprint=fp,
                                            policy_version=workflow.policy_version, env_fingerprint=env,
                                            others=others, now=timezone.now())
    return recovery.recovery_decide(inp)


def decision_full_trigger(workflow_slug: str, intent: str, inputs: dict, env: str = ENV):
    """A full ``run_trigger`` (locks, decision, the new run and its events), rolled back."""
    from django.db import transaction

    from ledger import services

    with transaction.atomic():
        run, _ = services.run_trigger(workflow_slug=workflow_slug, inputs=inputs, intent=intent,
                                      env_fingerprint=env, actor="agent:bench")
        transaction.set_rollback(True)
    return run.decision


def _samples(loader: BulkLoader, pool: list[IntentInfo], n: int, rng: random.Random) -> list[tuple]:
    """(workflow, intent, inputs): mostly the latest inputs (same fingerprint), 1 in 5 a new version."""
    chosen = [rng.choice(pool) for _ in range(n)]
    out = []
    for info in chosen:
        inputs = dict(info.inputs)
        if rng.random() < 0.2:
            inputs["version"] = inputs["version"] + 1
        out.append((info.workflow_slug, info.intent, inputs))
    return out


def measure_decisions(loader: BulkLoader, reps: int, per_rep: int, seed: int) -> dict:
    from collections import Counter

    rng = random.Random(seed)
    pool = loader.intents
    for args in _samples(loader, pool, min(20, per_rep), rng):  # warm-up: code paths and connection
        decision_read_path(*args)
        decision_full_trigger(*args)
    read_p50, read_p95, full_p50, full_p95, outcomes = [], [], [], [], Counter()
    for _ in range(reps):
        read, full = [], []
        for args in _samples(loader, pool, per_rep, rng):
            t0 = time.perf_counter()
            decision = decision_read_path(*args)
            t1 = time.perf_counter()
            decision_full_trigger(*args)
            t2 = time.perf_counter()
            read.append((t1 - t0) * 1000)
            full.append((t2 - t1) * 1000)
            outcomes[f"{decision.outcome}/{decision.reason_code}"] += 1
        read_p50.append(_pct(read, 0.50))
        read_p95.append(_pct(read, 0.95))
        full_p50.append(_pct(full, 0.50))
        full_p95.append(_pct(full, 0.95))
    return {"read_p50": _median(read_p50), "read_p95": _median(read_p95), "full_p50": _median(full_p50),
            "full_p95": _median(full_p95), "outcomes": outcomes}


def _plan_nodes(plan: dict):
    yield plan
    for child in plan.get("Plans", ()):
        yield from _plan_nodes(child)


def explain_decision(loader: BulkLoader, say: _Out) -> list[str]:
    """EXPLAIN ANALYZE every query of one read path (an intent whose work is complete, with effects)."""
    from django.db import connection, transaction
    from django.test.utils import CaptureQueriesContext

    info = next((i for i in reversed(loader.intents) if i.complete_with_effects), loader.intents[-1])
    with CaptureQueriesContext(connection) as captured:
        decision = decision_read_path(info.workflow_slug, info.intent, info.inputs)
    say(f"EXPLAIN of the decision's read path at {loader.totals['events']:,} events "
        f"(intent {info.intent!r} -> {decision.outcome}/{decision.reason_code}, {len(captured)} queries):")
    seq_scans = []
    with transaction.atomic(), connection.cursor() as cur:
        for n, query in enumerate(captured.captured_queries, 1):
            sql = query["sql"]
            cur.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql)
            raw = cur.fetchone()[0]
            doc = json.loads(raw) if isinstance(raw, str) else raw
            top = doc[0]
            nodes = list(_plan_nodes(top["Plan"]))
            scans = []
            for node in nodes:
                if "Relation Name" in node or "Index Name" in node:
                    what = node["Node Type"]
                    if node.get("Index Name"):
                        what += f" {node['Index Name']}"
                    else:
                        what += f" on {node['Relation Name']}"
                        if node["Node Type"] == "Seq Scan":
                            seq_scans.append(node["Relation Name"])
                    scans.append(what)
            table = re.search(r'FROM "(\w+)"', sql)
            where = re.search(r"WHERE (.*?)( ORDER BY| LIMIT| GROUP BY|$)", sql)
            cols = sorted(set(re.findall(r'"\w+"\."(\w+)"', where.group(1)))) if where else []
            say(f"  {n}. {table.group(1) if table else '?'} by {','.join(cols) or '-'}: "
                f"{'; '.join(scans) or top['Plan']['Node Type']} "
                f"({top.get('Execution Time', 0):.3f} ms)")
        transaction.set_rollback(True)
    if seq_scans:
        say(f"  WARNING: sequential scans on {', '.join(sorted(set(seq_scans)))}")
    return seq_scans


# ---------------------------------------------------------------------------------------------
# the whole run


def run(*, out, scale: float = 1.0, skip_http: bool = False, skip_load: bool = False, keep: bool = False,
        db_name: str = "stateboard_bench", reps: int = 5, duration: float = 3.0, clients: int = 4) -> Report:
    from django.conf import settings
    from django.db import connection

    say = _Out(out)
    if connection.vendor != "postgresql":
        raise BenchError("The ledger benchmark runs on PostgreSQL only (the database here is "
                         f"{connection.vendor}). Set DATABASE_URL=postgres://USER@HOST:5432/DBNAME; "
                         f"the bench creates its own scratch database {db_name!r} on that server.")
    report = Report()
    debug_was = settings.DEBUG
    settings.DEBUG = False  # query logging would slow every service call
    t_start = time.perf_counter()
    try:
        with scratch_database(db_name, say, keep):
            with connection.cursor() as cur:
                cur.execute("SELECT version(), current_setting('synchronous_commit'), "
                            "current_setting('shared_buffers')")
                version, sync, buffers = cur.fetchone()
            say(f"PostgreSQL: {version.split(',')[0]}; synchronous_commit={sync}, shared_buffers={buffers}; "
                f"{os.cpu_count()} CPUs; scale={scale:g}, reps={reps}, {duration:g} s per measurement, "
                f"{clients} clients (processes, one connection each); load average {_loadavg()}")
            raw_table_create()
            try:
                stream_workflow()
                _throughput(report, say, reps=reps, duration=duration, clients=clients)
                if not skip_http:
                    _http(report, say, db_name=db_name, reps=reps, duration=duration, clients=clients)
            finally:
                raw_table_drop()
            if not skip_load:
                _decisions(report, say, scale=scale, reps=reps)
    finally:
        settings.DEBUG = debug_was
    _summary(report, say, time.perf_counter() - t_start)
    return report


def _throughput(report: Report, say: _Out, *, reps: int, duration: float, clients: int) -> None:
    say("")
    say(f"== event appends and checkpoints through the service layer ({reps} reps x {duration:g} s each) ==")
    say(f"   stream: each client drives its own runs through {len(STREAM_STAGES)} stages ({len(EFFECT_STAGES)} "
        f"effect stages): {CALLS_PER_RUN} event_append calls per run")
    series = {k: [] for k in ("raw1", "rawN", "svc1", "svcN", "plain1", "plainN", "cp1")}
    guess1, guessN = 300.0, 200.0
    inline = 0
    for rep in range(1, reps + 1):
        m = {
            "raw1": measure_raw(1, duration),
            "rawN": measure_raw(clients, duration),
            "svc1": measure_service_stream(1, duration, guess1),
            "svcN": measure_service_stream(clients, duration, guessN),
            "plain1": measure_service_plain(1, duration),
            "plainN": measure_service_plain(clients, duration),
            "cp1": measure_checkpoint(1, duration),
        }
        guess1, guessN = m["svc1"].rate, m["svcN"].rate / clients
        inline += m["svc1"].extra.get("inline_triggers", 0) + m["svcN"].extra.get("inline_triggers", 0)
        for key, value in m.items():
            series[key].append(value.rate)
        say(f"  rep {rep}: raw {m['raw1'].rate:,.0f}/s x1, {m['rawN'].rate:,.0f}/s x{clients} | "
            f"stream {m['svc1'].rate:,.0f}/s x1, {m['svcN'].rate:,.0f}/s x{clients} | "
            f"plain {m['plain1'].rate:,.0f}/s x1, {m['plainN'].rate:,.0f}/s x{clients} | "
            f"checkpoint save+load {m['cp1'].rate:,.0f}/s x1")
    if inline:
        say(f"  note: {inline} runs were triggered inside a timed window (pre-triggered runs ran out)")
    med = {k: _median(v) for k, v in series.items()}
    report.figures.update({f"{k}_per_s": v for k, v in med.items()})
    for key, label, base_key, nclients in (("svc1", "append, service layer, stream", "raw1", 1),
                                           ("svcN", "append, service layer, stream", "rawN", clients),
                                           ("plain1", "append, service layer, plain (proposed)", "raw1", 1),
                                           ("plainN", "append, service layer, plain (proposed)", "rawN", clients)):
        ratio = _ratio(med[key], med[base_key])
        report.figures[f"{key}_ratio"] = ratio
        report.add(Row(f"{label}, {nclients} client{'s' if nclients > 1 else ''}", _rate(med[key]),
                       f"raw x{nclients} {_rate(med[base_key])}", f"{ratio:.3f}x",
                       f">= {TARGET_APPEND_MIN:.2f}x (aim {TARGET_APPEND_AIM:.2f}x)",
                       _verdict(ratio >= TARGET_APPEND_MIN) + (" aim" if ratio >= TARGET_APPEND_AIM else "")))
    ratio = _ratio(med["cp1"], med["raw1"])
    report.figures["cp1_ratio"] = ratio
    report.add(Row("checkpoint save + load latest, 1 client", _rate(med["cp1"]), f"raw x1 {_rate(med['raw1'])}",
                   f"{ratio:.3f}x", f">= {TARGET_CHECKPOINT_MIN:.2f}x", _verdict(ratio >= TARGET_CHECKPOINT_MIN)))
    say(f"  median: raw {med['raw1']:,.0f}/s x1, {med['rawN']:,.0f}/s x{clients}; stream {med['svc1']:,.0f}/s x1 "
        f"({_ratio(med['svc1'], med['raw1']):.3f}x), {med['svcN']:,.0f}/s x{clients} "
        f"({_ratio(med['svcN'], med['rawN']):.3f}x); plain {med['plain1']:,.0f}/s x1 "
        f"({_ratio(med['plain1'], med['raw1']):.3f}x), {med['plainN']:,.0f}/s x{clients} "
        f"({_ratio(med['plainN'], med['rawN']):.3f}x); checkpoint {med['cp1']:,.0f}/s "
        f"({_ratio(med['cp1'], med['raw1']):.3f}x)")


def _http(report: Report, say: _Out, *, db_name: str, reps: int, duration: float, clients: int) -> None:
    from ledger.identities import agent_create

    say("")
    say(f"== event appends through the HTTP API (gunicorn -w {HTTP_WORKERS}, {clients} client threads with "
        "requests.Session, 127.0.0.1) ==")
    _, token = agent_create(name=f"bench-http-{uuid.uuid4().hex[:6]}")
    series = {"rawN": [], "httpN": [], "hplainN": []}
    guess = 100.0
    with gunicorn_server(db_name, say) as base:
        for rep in range(1, reps + 1):
            m = {"rawN": measure_raw(clients, duration),
                 "httpN": measure_http_stream(base, token, clients, duration, guess),
                 "hplainN": measure_http_plain(base, token, clients, duration)}
            guess = m["httpN"].rate / clients
            for key, value in m.items():
                series[key].append(value.rate)
            say(f"  rep {rep}: raw {m['rawN'].rate:,.0f}/s x{clients} | HTTP stream {m['httpN'].rate:,.0f}/s | "
                f"HTTP plain {m['hplainN'].rate:,.0f}/s")
    med = {k: _median(v) for k, v in series.items()}
    report.figures.update({f"{k}_per_s": v for k, v in med.items()})
    for key, label in (("httpN", "append, HTTP API, stream"), ("hplainN", "append, HTTP API, plain (proposed)")):
        ratio = _ratio(med[key], med["rawN"])
        report.figures[f"{key}_ratio"] = ratio
        report.add(Row(f"{label}, {clients} clients", _rate(med[key]), f"raw x{clients} {_rate(med['rawN'])}",
                       f"{ratio:.3f}x", "(info)", ""))


def _decisions(report: Report, say: _Out, *, scale: float, reps: int) -> None:
    say("")
    say("== recovery decision latency (read path: workflow + holding runs + recovery_input_gather + "
        "recovery_decide; full: run_trigger rolled back) ==")
    full_events = max(1000, int(FULL_EVENTS * scale))
    full_runs = max(100, int(FULL_RUNS * scale))
    small_events = max(200, full_events // 100)
    small_runs = max(20, full_runs // 100)
    per_rep = max(50, min(300, int(300 * scale ** 0.25)))
    loader = BulkLoader(say)
    loader.load(events_target=small_events, runs_target=small_runs, label="small")
    small_total = dict(loader.totals)
    small = measure_decisions(loader, reps, per_rep, seed=1)
    say(f"  at {small_total['events']:,} events / {small_total['runs']:,} runs: read p50 {small['read_p50']:.2f} ms, "
        f"p95 {small['read_p95']:.2f} ms; full trigger p50 {small['full_p50']:.2f} ms, p95 {small['full_p95']:.2f} ms "
        f"({reps} x {per_rep} decisions)")
    say(f"  outcomes: {dict(small['outcomes'].most_common())}")
    say(f"loading ~{full_events:,} events / {full_runs:,} runs by COPY (progress every ~5 s) ...")
    loader.load(events_target=full_events - small_total["events"], runs_target=full_runs - small_total["runs"],
                label="full")
    big_total = dict(loader.totals)
    big = measure_decisions(loader, reps, per_rep, seed=2)
    say(f"  at {big_total['events']:,} events / {big_total['runs']:,} runs: read p50 {big['read_p50']:.2f} ms, "
        f"p95 {big['read_p95']:.2f} ms; full trigger p50 {big['full_p50']:.2f} ms, p95 {big['full_p95']:.2f} ms "
        f"({reps} x {per_rep} decisions)")
    say(f"  outcomes: {dict(big['outcomes'].most_common())}")
    seq_scans = explain_decision(loader, say)
    growth = _ratio(big["read_p95"], small["read_p95"])
    report.figures.update({
        "decision_small_events": small_total["events"], "decision_big_events": big_total["events"],
        "decision_small_p50_ms": small["read_p50"], "decision_small_p95_ms": small["read_p95"],
        "decision_big_p50_ms": big["read_p50"], "decision_big_p95_ms": big["read_p95"],
        "trigger_small_p95_ms": small["full_p95"], "trigger_big_p95_ms": big["full_p95"],
        "decision_growth": growth, "decision_seq_scans": seq_scans,
    })
    s_label, b_label = f"{small_total['events']:,}", f"{big_total['events']:,}"
    report.add(Row(f"recovery decision p50 / p95 at {s_label} events", f"{small['read_p50']:.2f} / "
                   f"{small['read_p95']:.2f} ms", "", "", "(reference)", ""))
    report.add(Row(f"recovery decision p50 / p95 at {b_label} events", f"{big['read_p50']:.2f} / "
                   f"{big['read_p95']:.2f} ms", f"p95 at {s_label}: {small['read_p95']:.2f} ms", f"{growth:.2f}x",
                   f"p95 <= {TARGET_DECISION_P95_MS:g} ms, <= {TARGET_DECISION_GROWTH:g}x",
                   _verdict(big["read_p95"] <= TARGET_DECISION_P95_MS and growth <= TARGET_DECISION_GROWTH)))
    report.add(Row(f"run_trigger (rolled back) p50 / p95 at {s_label}", f"{small['full_p50']:.2f} / "
                   f"{small['full_p95']:.2f} ms", "", "", "(info)", ""))
    report.add(Row(f"run_trigger (rolled back) p50 / p95 at {b_label}", f"{big['full_p50']:.2f} / "
                   f"{big['full_p95']:.2f} ms", "", f"{_ratio(big['full_p95'], small['full_p95']):.2f}x", "(info)", ""))


def _loadavg() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def _summary(report: Report, say: _Out, elapsed: float) -> None:
    say("")
    say(f"== summary (medians; ratio = value / baseline, both measured in this run; {elapsed:.0f} s; "
        f"load average at the end {_loadavg()}) ==")
    headers = ("figure", "value", "baseline", "ratio", "target", "verdict")
    table = [headers] + [(r.figure, r.value, r.baseline, r.ratio, r.target, r.verdict) for r in report.rows]
    widths = [max(len(str(row[i])) for row in table) for i in range(len(headers))]
    for n, row in enumerate(table):
        say("  " + " | ".join(str(cell).ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
        if n == 0:
            say("  " + "-+-".join("-" * w for w in widths))
