"""``bench costs``: what one request of each kind costs, measured in one process through the whole HTTP
stack as a web worker runs it (Django's WSGI handler, the middleware, DRF, the policy pipeline, the
token check; not the server's socket work): the web process's CPU ms, the database's CPU ms for it
(the server backend's own CPU time, read from ``/proc/<backend pid>/schedstat`` around each request),
and the statements it sends, each a round trip (BEGIN and COMMIT counted).

``--against REV`` first measures an earlier release the same way, in the same sitting: this file runs
inside that release's exported tree (it uses only URLs and services both have), on its own scratch
database. The table then shows both and each cost's ratio (now / before).
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

KINDS = (
    ("plain", "plain append (`proposed` on an executing stage)"),
    ("stage_pass", "stage-passing append (`succeeded`: a server checkpoint)"),
    ("batch", "batch of 20 plain events"),
    ("trigger", "new trigger (decided, handed to the agent)"),
    ("duplicate", "duplicate trigger (same trigger_key)"),
    ("lease", "lease that gets a run (a woken long-poll's look)"),
    ("lease_empty", "lease that finds none (a long-poll's first look)"),
    ("checkpoint", "checkpoint save"),
    ("resume", "resume packet"),
)
STAGES = [f"s{i:02d}" for i in range(40)]


def _schedstat_ns(pid: int) -> int:
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])


class _Wsgi:
    def __init__(self, application, token: str):
        self.application, self.token = application, token

    def call(self, method: str, path: str, body=None, token: str | None = None) -> tuple[int, object]:
        data = json.dumps(body).encode() if body is not None else b""
        environ = {"REQUEST_METHOD": method, "PATH_INFO": path, "QUERY_STRING": "", "SERVER_NAME": "127.0.0.1",
                   "SERVER_PORT": "8000", "HTTP_HOST": "127.0.0.1", "wsgi.url_scheme": "http",
                   "SERVER_PROTOCOL": "HTTP/1.1", "wsgi.input": io.BytesIO(data), "CONTENT_LENGTH": str(len(data)),
                   "CONTENT_TYPE": "application/json", "HTTP_AUTHORIZATION": f"Token {token or self.token}",
                   "REMOTE_ADDR": "127.0.0.1", "wsgi.errors": sys.stderr}
        answer = {}
        response = self.application(environ, lambda status, headers, exc_info=None: answer.update(status=status))
        content = b"".join(response)
        response.close()
        status = int(answer["status"].split()[0])
        return status, (json.loads(content) if content else None)


def _measure(ops: int) -> dict:
    """In the child: each kind's mean web CPU ms, database CPU ms and statements per request."""
    import django

    django.setup()
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from ledger.identities import agent_create, operator_create
    from ledger.models import Workflow
    from stateboard.wsgi import application

    slug, queue_slug, idle_slug = (f"costs-{uuid.uuid4().hex[:6]}-{n}" for n in ("work", "queue", "idle"))
    for name in (slug, queue_slug, idle_slug):
        Workflow.objects.create(slug=name, title=name, stages=STAGES, effect_stages=[], approval_stages=[],
                                lease_seconds=600)
    agent, token = agent_create(name=f"costs-{uuid.uuid4().hex[:6]}")
    _, owner = operator_create(name=f"costs-owner-{uuid.uuid4().hex[:6]}", role="owner", with_token=True)
    http = _Wsgi(application, token)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        backend = cursor.fetchone()[0]
    counter = itertools.count()

    def run(**trigger) -> str:
        status, body = http.call("POST", "/api/v1/runs/", {"workflow": slug, "inputs": {},
                                                           "intent": f"i-{next(counter)}", **trigger})
        assert status == 201, body
        return body["id"]

    working = run()
    http.call("POST", f"/api/v1/runs/{working}/events/", {"stage": STAGES[0], "kind": "started"})
    passing = {"run": run(), "stage": 0}
    keyed = {"workflow": slug, "inputs": {}, "intent": "dup", "trigger_key": "costs-duplicate"}
    http.call("POST", "/api/v1/runs/", keyed)

    def plain():
        return "POST", f"/api/v1/runs/{working}/events/", {
            "client_event_id": uuid.uuid4().hex, "stage": STAGES[0], "kind": "proposed",
            "data": {"proposal": "retry the flaky test", "confidence": 0.7}}

    def stage_pass():
        if passing["stage"] >= len(STAGES) - 1:
            passing.update(run=run(), stage=0)
        stage = STAGES[passing["stage"]]
        passing["stage"] += 1
        status, _ = http.call("POST", f"/api/v1/runs/{passing['run']}/events/", {"stage": stage, "kind": "started"})
        assert status == 201
        return "POST", f"/api/v1/runs/{passing['run']}/events/", {
            "client_event_id": uuid.uuid4().hex, "stage": stage, "kind": "succeeded", "data": {"summary": "done"}}

    def batch():
        return "POST", f"/api/v1/runs/{working}/events/", [plain()[2] for _ in range(20)]

    def trigger():
        return "POST", "/api/v1/runs/", {"workflow": slug, "inputs": {}, "intent": f"t-{next(counter)}"}

    def lease():
        status, _ = http.call("POST", "/api/v1/runs/", {"workflow": queue_slug, "inputs": {},
                                                        "intent": f"q-{next(counter)}"}, token=owner)
        assert status == 201
        return "POST", "/api/v1/runs/lease/", {"workflows": [queue_slug], "wait_seconds": 0}

    def checkpoint():
        return "POST", f"/api/v1/runs/{working}/checkpoints/", {
            "stage": STAGES[0], "state_table": {STAGES[0]: {"status": "pending", "summary": "half way"}}}

    makers = {
        "plain": plain, "stage_pass": stage_pass, "batch": batch, "trigger": trigger,
        "duplicate": lambda: ("POST", "/api/v1/runs/", keyed), "lease": lease,
        "lease_empty": lambda: ("POST", "/api/v1/runs/lease/", {"workflows": [idle_slug], "wait_seconds": 0}),
        "checkpoint": checkpoint, "resume": lambda: ("GET", f"/api/v1/runs/{working}/resume-packet/", None),
    }
    figures = {}
    for kind, _ in KINDS:
        make = makers[kind]
        web = db = statements = 0
        for i in range(ops + 20):
            method, path, body = make()
            counting = 10 <= i < 20  # statements counted on warmed-up requests, apart from the timed ones
            with CaptureQueriesContext(connection) if counting else contextlib.nullcontext() as captured:
                db_before, web_before = _schedstat_ns(backend), time.process_time()
                status, answer = http.call(method, path, body)
                web_after, db_after = time.process_time(), _schedstat_ns(backend)
            if status >= 300 and not (kind == "lease_empty" and status == 204):
                raise SystemExit(f"{kind}: {method} {path} answered {status}: {answer}")
            if counting:
                statements += len(captured.captured_queries)
            elif i >= 20:
                web += web_after - web_before
                db += (db_after - db_before) / 1e6
        statements /= 10
        figures[kind] = {"web_ms": web * 1000 / ops, "db_ms": db / ops, "statements": statements}
    return figures


def _child_env(db_url: str, tree: Path) -> dict:
    return {**os.environ, "DJANGO_SETTINGS_MODULE": "stateboard.settings", "PYTHONPATH": str(tree),
            "DATABASE_URL": db_url, "DB_POOL": "1", "DB_POOL_MAX": "1", "DEBUG": "0", "ALLOWED_HOSTS": "127.0.0.1",
            "LOG_LEVEL": "WARNING", "SECRET_KEY": os.environ.get("SECRET_KEY") or "bench-costs"}


def _run_child(tree: Path, db_url: str, ops: int) -> dict:
    script = tree / "ledger" / "ops" / "bench" / "costs.py"
    result = subprocess.run([sys.executable, str(script), str(ops)], cwd=tree, env=_child_env(db_url, tree),
                            capture_output=True, text=True, timeout=1800)
    if result.returncode != 0:
        from ledger.ops.bench.common import BenchError

        raise BenchError(f"bench costs in {tree} failed ({result.returncode}):\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def run(*, out, db_name: str, ops: int = 200, against: str | None = None) -> dict:
    """Print the cost table (and the release before's, with ``against``); returns the figures."""
    from ledger.ops.bench.against import ROOT, _export
    from ledger.ops.bench.common import Out, database_url, scratch_database

    say = Out(out)
    results = {}
    if against:
        with tempfile.TemporaryDirectory(prefix="stateboard-costs-") as tree:
            _export(against, tree)
            target = Path(tree) / "ledger" / "ops" / "bench" / "costs.py"
            target.write_text(Path(__file__).read_text())  # the same measurement, of that release's code
            before_db = f"{db_name}_before"
            with scratch_database(before_db, say, keep=False):
                say(f"measuring {against} ({ops} requests of each kind) ...")
                results["before"] = _run_child(Path(tree), database_url(before_db), ops)
    say(f"measuring this tree ({ops} requests of each kind) ...")
    results["now"] = _run_child(ROOT, database_url(db_name), ops)
    say("")
    header = f"  {'request kind':58s} {'web CPU ms':>11s} {'db CPU ms':>10s} {'statements':>11s}"
    say(header + (f"   {'before: web / db / statements':>32s}  web ratio" if against else ""))
    for kind, label in KINDS:
        now = results["now"][kind]
        line = f"  {label:58s} {now['web_ms']:>11.2f} {now['db_ms']:>10.2f} {now['statements']:>11.1f}"
        if against:
            before = results["before"][kind]
            line += (f"   {before['web_ms']:>9.2f} / {before['db_ms']:>5.2f} / {before['statements']:>5.1f}"
                     f"    {now['web_ms'] / before['web_ms']:.2f}x")
        say(line)
    return results


if __name__ == "__main__":
    print(json.dumps(_measure(int(sys.argv[1]))))
