"""Append and checkpoint workloads: event streams through the service layer and through the HTTP
API (the web server `up` runs), plain appends, and checkpoint save + load. Each ``measure_*`` runs ``clients``
concurrent clients for ``duration`` seconds (``common.run_clients``) and returns a ``Measure``."""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import secrets
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit

from django.conf import settings
from django.utils import timezone

from ledger.ops.bench.common import BenchError, Measure, Out, database_url, run_clients
from stateboard.webserver import processes_stop, server_name, web_command

STREAM_WORKFLOW = "bench-stream"
EFFECT_STAGES = ("commit", "push", "deploy")
STREAM_STAGES = (
    "fetch", "parse", "dedupe", "classify", "assess", "plan", "draft", "review", "lint", "commit",
    "build", "test", "package", "push", "stage", "smoke", "approve", "deploy", "monitor", "report",
)


# ---------------------------------------------------------------------------------------------
# event streams (shared by the service-layer and HTTP clients)


def _iso_now() -> str:
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
    from ledger.models import Workflow  # (d) the instructions child imports this pre-setup

    workflow, _ = Workflow.objects.get_or_create(
        slug=STREAM_WORKFLOW,
        defaults={"title": "Bench stream", "stages": list(STREAM_STAGES), "effect_stages": list(EFFECT_STAGES),
                  "approval_stages": [], "lease_seconds": 3600, "max_retries": 3})
    return workflow


def _service_trigger(actor: str) -> str:
    from ledger import services  # (d) the instructions child imports this pre-setup

    run, _ = services.run_trigger(workflow_slug=STREAM_WORKFLOW, inputs={"item": uuid.uuid4().hex},
                                  intent=f"{actor}/{uuid.uuid4().hex[:12]}", env_fingerprint="img:1",
                                  actor=actor)
    assert run.state == "fresh", run.state
    return run.id


def measure_service_stream(clients: int, duration: float, rate_guess: float) -> Measure:
    from ledger import services  # (d) the instructions child imports this pre-setup

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
    from ledger import services  # (d) the instructions child imports this pre-setup

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
    from ledger import selectors, services  # (d) the instructions child imports this pre-setup
    from ledger.models import Run  # (d) the instructions child imports this pre-setup

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
# HTTP API (the web server as `up` runs it)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def web_server(db_name: str, say: Out, server: str | None = None, **env_extra: str):
    """The web server started as ``manage.py up`` starts it (``stateboard.webserver``; ``server`` overrides
    ``WEB_SERVER``), on a free port."""
    import requests  # (c) a test extra, not a product dependency

    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    server = server or server_name()
    cmd = web_command(sys.executable, f"127.0.0.1:{port}", server)
    env = dict(os.environ)
    env.update(DATABASE_URL=database_url(db_name), DEBUG="0", ALLOWED_HOSTS="127.0.0.1",
               SECRET_KEY=os.environ.get("SECRET_KEY") or secrets.token_urlsafe(50),
               DJANGO_SETTINGS_MODULE="stateboard.settings", LOG_LEVEL="WARNING", **env_extra)
    log = (Path(settings.BASE_DIR) / "var")
    log.mkdir(parents=True, exist_ok=True)
    log_path = log / f"bench-{server}.log"
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(cmd, cwd=settings.BASE_DIR, env=env, stdout=log_file, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise BenchError(f"{server} exited with {proc.returncode}; see {log_path}:\n"
                                 + log_path.read_text(errors="replace")[-2000:])
            try:
                requests.get(base + "/healthz", timeout=5)
                break
            except requests.RequestException:
                if time.monotonic() > deadline:
                    raise BenchError(f"{server} did not answer on {base} within 60 s; see {log_path}")
                time.sleep(0.2)
        pool = env.get("DB_POOL", "1")
        say(f"{server} up: {' '.join(cmd[3:])} (DEBUG off, DB_POOL={pool}), log {log_path}")
        yield base
    finally:
        processes_stop([proc], wait=20)
        say(f"{server} stopped")


class _Closed(Exception):
    """The server closed the connection before a whole response arrived."""


class _Http:
    """An agent's HTTP/1.1 client on one keep-alive connection, written against the socket: the load
    generator shares the machine's two cores with the server it measures, so whatever it spends per call
    shows up as the server's. ``requests`` spent ~0.8 ms of CPU per call on this path and ``http.client``
    ~0.4 ms (its header parsing goes through ``email.parser``); this one builds each request in one
    string and reads only the status line, the body's length and the body. Every answer is still checked:
    its status against ``expect`` and its body parsed as JSON."""

    IDLE_RECONNECT = 3.0  # seconds; the server closes a keep-alive connection idle for 5 s

    def __init__(self, base: str, token: str):
        parts = urlsplit(base)
        self.address = (parts.hostname, parts.port)
        self.headers = (f"Host: {parts.hostname}:{parts.port}\r\nAuthorization: Token {token}\r\n"
                        "Content-Type: application/json\r\n")
        self.sock, self.buffer, self.used = None, b"", 0.0

    def _connection(self) -> socket.socket:
        if self.sock is None or time.monotonic() - self.used > self.IDLE_RECONNECT:
            self.close()
            self.sock = socket.create_connection(self.address, timeout=30)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return self.sock

    def get(self, path: str, expect=(200,)):
        return self._request("GET", path, None, expect)

    def post(self, path: str, body, expect=(201,)):
        return self._request("POST", path, body, expect)

    def _request(self, method: str, path: str, body, expect):
        payload = b"" if body is None else json.dumps(body).encode()
        message = (f"{method} {path} HTTP/1.1\r\n{self.headers}Content-Length: {len(payload)}\r\n\r\n").encode()
        for attempt in (1, 2):
            sock = self._connection()
            try:
                sock.sendall(message + payload)
                status, text = self._response()
                break
            except (_Closed, ConnectionResetError, BrokenPipeError):
                self.close()  # the server closed the idle connection first: once more on a new one
                if attempt == 2:
                    raise
                expect = (*expect, 200)  # the same client_event_id / trigger key answers 200 the second time
        self.used = time.monotonic()
        if status not in expect:
            raise BenchError(f"{method} {path} answered {status}: {text[:500]!r}")
        return json.loads(text)

    def _recv(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise _Closed()
        self.buffer += chunk

    def _response(self) -> tuple[int, bytes]:
        """(status, body) of the next response on the connection; the connection is closed after it
        when the server says so."""
        while (end := self.buffer.find(b"\r\n\r\n")) < 0:
            self._recv()
        head, self.buffer = self.buffer[:end].decode("latin-1"), self.buffer[end + 4:]
        status_line, *lines = head.split("\r\n")
        fields = {}
        for line in lines:
            name, _, value = line.partition(":")
            fields[name.strip().lower()] = value.strip()
        status = int(status_line.split(" ", 2)[1])
        if "content-length" in fields:
            body = self._take(int(fields["content-length"]))
        elif fields.get("transfer-encoding", "").lower() == "chunked":
            body = self._chunked()
        else:
            raise BenchError(f"a response with neither Content-Length nor chunked encoding: {head[:300]!r}")
        if fields.get("connection", "").lower() == "close":
            self.close()
        return status, body

    def _take(self, size: int) -> bytes:
        while len(self.buffer) < size:
            self._recv()
        data, self.buffer = self.buffer[:size], self.buffer[size:]
        return data

    def _chunked(self) -> bytes:
        parts = []
        while True:
            while (end := self.buffer.find(b"\r\n")) < 0:
                self._recv()
            size = int(self.buffer[:end].split(b";")[0], 16)
            self.buffer = self.buffer[end + 2:]
            parts.append(self._take(size))
            self._take(2)  # the CRLF after the chunk (after the last one, an empty trailer)
            if size == 0:
                return b"".join(parts)

    def trigger(self, name: str) -> str:
        body = {"workflow": STREAM_WORKFLOW, "intent": f"{name}/{uuid.uuid4().hex[:12]}",
                "inputs": {"item": uuid.uuid4().hex}, "env_fingerprint": "img:1"}
        run = self.post("/api/v1/runs/", body)
        if run.get("state") != "fresh":
            raise BenchError(f"HTTP trigger gave state {run.get('state')!r}, expected 'fresh'")
        return run["id"]

    def close(self):
        if self.sock is not None:
            self.sock.close()
        self.sock, self.buffer = None, b""


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


def measure_http_floor(base: str, token: str, clients: int, duration: float) -> Measure:
    """``GET /healthz`` (a plain Django view: one ``SELECT 1``, one Redis PING) through the same server and
    clients: what any request costs on this web tier before the ledger does anything."""
    def prepare(i):
        return _Http(base, token)

    return run_clients(clients, prepare, lambda http: http.get("/healthz"), duration, lambda http: http.close())
