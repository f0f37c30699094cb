"""The agent's path: HTTP latency of one client, batches of events (HTTP and service layer),
duplicate triggers over HTTP, triggers of many intents of one workflow (the intent lock beside the
former per-workflow lock, measured in the same run), and SQL statements per request."""

from __future__ import annotations

import contextlib
import json
import time
import uuid

from django.db import connection, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext

from ledger.ops.bench.appends import STREAM_STAGES, STREAM_WORKFLOW, _Http, _service_trigger, plain_body
from ledger.ops.bench.common import Measure, percentile, run_clients

BATCH_SIZE = 20
INTENTS_WORKFLOW = "bench-intents"
INTENTS = 16


def _started_run_http(http: _Http, name: str) -> str:
    run_id = http.trigger(name)
    http.post(f"/api/v1/runs/{run_id}/events/", {"stage": STREAM_STAGES[0], "kind": "started"})
    return run_id


def measure_http_latency(base: str, token: str, n: int) -> dict:
    """One client, ``n`` plain appends one after another: p50 / p95 in ms."""
    http = _Http(base, token)
    try:
        run_id = _started_run_http(http, "http-latency")
        samples = []
        for _ in range(n):
            started = time.perf_counter()
            http.post(f"/api/v1/runs/{run_id}/events/", plain_body(STREAM_STAGES[0]))
            samples.append((time.perf_counter() - started) * 1000)
    finally:
        http.close()
    return {"p50": percentile(samples, 0.5), "p95": percentile(samples, 0.95)}


def measure_health_latency(base: str, n: int) -> dict:
    """One client, ``n`` ``GET /healthz`` one after another (the web tier's floor): p50 / p95 in ms."""
    http = _Http(base, "")
    try:
        samples = []
        for _ in range(n):
            started = time.perf_counter()
            http.get("/healthz")
            samples.append((time.perf_counter() - started) * 1000)
    finally:
        http.close()
    return {"p50": percentile(samples, 0.5), "p95": percentile(samples, 0.95)}


def measure_http_batch(base: str, token: str, clients: int, duration: float, size: int = BATCH_SIZE) -> Measure:
    """Batches of ``size`` plain events over HTTP; the Measure counts events."""
    def prepare(i):
        http = _Http(base, token)
        return {"http": http, "run": _started_run_http(http, f"http-batch-{i}")}

    def step(ctx):
        body = [plain_body(STREAM_STAGES[0]) for _ in range(size)]
        ctx["http"].post(f"/api/v1/runs/{ctx['run']}/events/", body)

    m = run_clients(clients, prepare, step, duration, lambda ctx: ctx["http"].close())
    return Measure(m.ops * size, m.seconds, m.extra)


def measure_service_batch(clients: int, duration: float, size: int = BATCH_SIZE) -> Measure:
    """Batches of ``size`` plain events through ``services.events_append``; the Measure counts events."""
    from ledger import services  # (d) the instructions child imports this pre-setup

    def prepare(i):
        actor = f"agent:bench-batch-{i}"
        run_id = _service_trigger(actor)
        services.event_append(run_id=run_id, body={"stage": STREAM_STAGES[0], "kind": "started"}, actor=actor)
        return {"actor": actor, "run": run_id}

    def step(ctx):
        services.events_append(run_id=ctx["run"], bodies=[plain_body(STREAM_STAGES[0]) for _ in range(size)],
                               actor=ctx["actor"])

    m = run_clients(clients, prepare, step, duration)
    return Measure(m.ops * size, m.seconds, m.extra)


def measure_duplicate_trigger(base: str, token: str, n: int) -> dict:
    """One client resending one keyed trigger ``n`` times (200, the same run): p50 / p95 in ms."""
    http = _Http(base, token)
    body = {"workflow": STREAM_WORKFLOW, "intent": f"dup/{uuid.uuid4().hex[:8]}", "inputs": {"item": 1},
            "trigger_key": f"dup-{uuid.uuid4().hex}", "env_fingerprint": "img:1"}
    try:
        first = http.post("/api/v1/runs/", body)
        samples = []
        for _ in range(n):
            started = time.perf_counter()
            again = http.post("/api/v1/runs/", body, expect=(200,))
            samples.append((time.perf_counter() - started) * 1000)
            assert again["id"] == first["id"]
    finally:
        http.close()
    return {"p50": percentile(samples, 0.5), "p95": percentile(samples, 0.95)}


def intents_workflow():
    from ledger.models import Workflow  # (d) the instructions child imports this pre-setup

    workflow, _ = Workflow.objects.get_or_create(
        slug=INTENTS_WORKFLOW, defaults={"title": "Bench intents", "stages": list(STREAM_STAGES[:4]),
                                         "effect_stages": [], "approval_stages": [], "lease_seconds": 3600})
    return workflow


def measure_intent_triggers(clients: int, duration: float, *, workflow_lock: bool) -> Measure:
    """New (unkeyed) triggers of ``INTENTS`` intents of one workflow, client i cycling through its share.
    ``workflow_lock``: each trigger first locks the workflow row, as every trigger did before the intent lock."""
    from ledger import services  # (d) the instructions child imports this pre-setup
    from ledger.models import Workflow  # (d) the instructions child imports this pre-setup

    tag = uuid.uuid4().hex[:6]
    per_client = max(1, INTENTS // clients)

    def prepare(i):
        return {"i": i, "k": 0, "actor": f"agent:bench-intents-{i}"}

    def step(ctx):
        intent = f"{tag}-{ctx['i'] + clients * (ctx['k'] % per_client)}"
        ctx["k"] += 1
        if not workflow_lock:  # as an agent's trigger runs
            services.run_trigger(workflow_slug=INTENTS_WORKFLOW, inputs={"n": 1}, intent=intent, actor=ctx["actor"])
            return
        with transaction.atomic():
            Workflow.objects.select_for_update().get(slug=INTENTS_WORKFLOW)
            services.run_trigger(workflow_slug=INTENTS_WORKFLOW, inputs={"n": 1}, intent=intent, actor=ctx["actor"])

    return run_clients(clients, prepare, step, duration)


# ---------------------------------------------------------------------------------------------
# statements per request


_CONTROL = ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE")


class Counted:
    """What ``statements_counted`` saw: the statements sent to the database; transaction control counts
    neither as a statement nor as a round trip."""

    def __init__(self):
        self.messages: list[str] = []

    def _statements_of(self, message: str) -> list[str]:
        return [message] if message.split(None, 1)[0].upper() not in _CONTROL else []

    @property
    def statements(self) -> list[str]:
        return [statement for message in self.messages for statement in self._statements_of(message)]

    @property
    def round_trips(self) -> int:
        return sum(1 for message in self.messages if self._statements_of(message))

    def __str__(self) -> str:
        return f"{len(self.statements)} ({self.round_trips} round trips)"


@contextlib.contextmanager
def statements_counted():
    """Every SQL statement of the block (Django's query log: the one pipeline sends nothing else).
    Yields a ``Counted``, complete once the block ends."""
    counted = Counted()
    with CaptureQueriesContext(connection) as captured:
        yield counted
    counted.messages.extend(q["sql"] for q in captured.captured_queries)


def statements_per_request(token: str) -> dict:
    """Statements (and round trips: ``Counted``) of one request each, through Django's test client in this
    process (token auth included)."""
    client = Client(HTTP_AUTHORIZATION=f"Token {token}", HTTP_HOST="127.0.0.1")

    def post(path, body, expect):
        response = client.post(path, json.dumps(body), content_type="application/json")
        assert response.status_code == expect, (path, response.status_code, response.content[:300])
        return response.json()

    trigger = {"workflow": STREAM_WORKFLOW, "intent": f"stmts/{uuid.uuid4().hex[:8]}", "inputs": {"item": 2},
               "trigger_key": f"stmts-{uuid.uuid4().hex}", "env_fingerprint": "img:1"}
    counts = {}
    with statements_counted() as trig:
        run = post("/api/v1/runs/", trigger, 201)
    counts["trigger (new run)"] = trig
    with statements_counted() as dup:
        post("/api/v1/runs/", trigger, 200)
    counts["trigger (duplicate)"] = dup
    events = f"/api/v1/runs/{run['id']}/events/"
    post(events, {"stage": STREAM_STAGES[0], "kind": "started"}, 201)
    post(events, plain_body(STREAM_STAGES[0]), 201)  # warm
    with statements_counted() as one:
        post(events, plain_body(STREAM_STAGES[0]), 201)
    counts["append (plain)"] = one
    with statements_counted() as passed:
        post(events, {"client_event_id": uuid.uuid4().hex, "stage": STREAM_STAGES[0], "kind": "succeeded"}, 201)
    counts["append (stage passed: checkpoint + transition)"] = passed
    with statements_counted() as batch:
        post(events, [{"client_event_id": uuid.uuid4().hex, "stage": STREAM_STAGES[1], "kind": "started"}]
             + [plain_body(STREAM_STAGES[1]) for _ in range(BATCH_SIZE - 1)], 201)
    counts[f"append batch of {BATCH_SIZE}"] = batch
    for label, path in (("page GET /runs/{id}/", f"/api/v1/runs/{run['id']}/"),
                        ("page GET /runs/{id}/events/ (one page)", events)):
        with statements_counted() as page:
            response = client.get(path)
            assert response.status_code == 200, response.content[:300]
        counts[label] = page
    return counts
