"""The web tier as `up` starts it (granian, ASGI), with two threads: a waiting lease holds no web thread
(SPEC §11.3), many agents long-polling leave the server answering everyone else, and framing holds."""

import http.client
import json
import os
import subprocess
import sys
import threading
import time

import pytest
from django.conf import settings
from django.db import connection

from stateboard import webserver
from tests.factories import make_agent, make_operator, make_workflow
from tests.stateboard.test_up import ROOT, _free_port, _wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

THREADS = 2


@pytest.fixture(scope="module")
def server(django_db_setup, django_db_blocker, tmp_path_factory):
    """granian serving stateboard.asgi on this test process's database: one worker, two threads."""
    with django_db_blocker.unblock():
        db = connection.settings_dict
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env.update(DATABASE_URL=f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
               WEB_WORKERS="1", WEB_THREADS=str(THREADS), DEBUG="0", ALLOWED_HOSTS="127.0.0.1",
               SECRET_KEY=settings.SECRET_KEY, STATEBOARD_VAR_DIR=str(tmp_path_factory.mktemp("var")))
    log = tmp_path_factory.mktemp("log") / "web.log"
    with open(log, "wb") as out:
        web = subprocess.Popen(webserver.web_command(sys.executable, f"127.0.0.1:{port}", "granian"), cwd=ROOT,
                               env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def answering():
        try:
            return _call(port, "GET", "/healthz")[0] in (200, 503)
        except OSError:
            return False

    try:
        _wait_for(answering, "granian to answer", 60)
        yield port
    finally:
        webserver.processes_stop([web], wait=10)


def _call(port, method, path, body=None, token=None, timeout=60):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Token {token}"
    try:
        conn.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
        response = conn.getresponse()
        data = response.read()
        return response.status, (json.loads(data) if data else None), dict(response.getheaders())
    finally:
        conn.close()


class Waiter(threading.Thread):
    """One agent's `POST /runs/lease/` with `wait_seconds`, timed from send to answer."""

    def __init__(self, port, token, wait_seconds, workflows=None):
        super().__init__(daemon=True)
        self.port, self.token, self.wait_seconds, self.workflows = port, token, wait_seconds, workflows
        self.status = self.body = self.headers = self.took = None

    def run(self):
        body = {"wait_seconds": self.wait_seconds, **({"workflows": self.workflows} if self.workflows else {})}
        started = time.monotonic()
        self.status, self.body, self.headers = _call(self.port, "POST", "/api/v1/runs/lease/", body, self.token)
        self.took = time.monotonic() - started


def _start(waiters):
    for waiter in waiters:
        waiter.start()
    time.sleep(1.0)  # every one has passed the pipeline once and is parked
    return waiters


def test_waiting_leases_leave_the_threads_serving_and_a_queued_run_is_leased_at_once(server):
    workflow = make_workflow(stages=["only"], effect_stages=[], approval_stages=[])
    _, owner = make_operator("owner")
    tokens = [make_agent()[1] for _ in range(3)]
    waiters = _start([Waiter(server, tokens[i % 3], 6, [workflow.slug]) for i in range(30)])

    # 30 waiters and 2 threads: were a waiter holding a thread, nothing else would be answered now.
    for _ in range(20):
        assert _call(server, "GET", "/healthz", timeout=3)[0] in (200, 503)
    assert all(waiter.is_alive() for waiter in waiters)

    status, run, _ = _call(server, "POST", "/api/v1/runs/", {"workflow": workflow.slug, "inputs": {"n": 1}}, owner)
    assert status == 201 and run["queued"]
    queued_at = time.monotonic()
    leased = _wait_for(lambda: [w for w in waiters if not w.is_alive() and w.status == 200], "a lease", 5)
    assert time.monotonic() - queued_at <= 1.0, "a newly queued run waited for a poll"
    assert [w.body["id"] for w in leased] == [run["id"]]
    assert sum(w.is_alive() for w in waiters) == len(waiters) - 1  # the others still wait

    for waiter in waiters:
        waiter.join(10)
    answered = [w for w in waiters if w.status == 204]
    assert len(answered) == len(waiters) - 1
    assert all(w.took <= w.wait_seconds + 1 for w in answered), max(w.took for w in answered)
    assert all(w.took >= w.wait_seconds - 0.5 for w in answered)  # they did wait
    assert not any("stateboard-lease-wait" in {k.lower() for k in w.headers} for w in waiters)


def test_two_hundred_agents_long_polling_on_threads_are_each_answered_in_time(server):
    """200 agents, each waiting on a thread of its own (as a synchronous client does): a run queued among
    them is leased within a second, and every other is answered at its deadline, not a second later (their
    deadlines meet: the last answers cost no looks)."""
    workflow = make_workflow(stages=["only"], effect_stages=[], approval_stages=[])
    _, owner = make_operator("owner")
    tokens = [make_agent()[1] for _ in range(10)]
    waiters = [Waiter(server, tokens[i % 10], 8, [workflow.slug]) for i in range(200)]
    for waiter in waiters:
        waiter.start()
    time.sleep(3.0)  # every one has looked once and is parked
    assert _call(server, "GET", "/healthz", timeout=3)[0] in (200, 503)
    status, run, _ = _call(server, "POST", "/api/v1/runs/", {"workflow": workflow.slug, "inputs": {}}, owner)
    assert status == 201 and run["queued"]
    queued_at = time.monotonic()
    leased = _wait_for(lambda: [w for w in waiters if not w.is_alive() and w.status == 200], "a lease", 5)
    assert time.monotonic() - queued_at <= 1.0 and [w.body["id"] for w in leased] == [run["id"]]
    for waiter in waiters:
        waiter.join(15)
    answered = [w for w in waiters if w.status == 204]
    assert len(answered) == 199
    assert max(w.took - w.wait_seconds for w in answered) <= 1.0, max(w.took for w in answered)


def test_a_wake_up_reaches_a_waiter_that_may_take_the_run(server):
    """The oldest waiters ask for another workflow, or are not among the workflow's `agents`: the run
    goes to the one that may take it, passed on without waiting for a deadline."""
    wanted = make_workflow(stages=["only"], effect_stages=[], approval_stages=[], agents=["picked"])
    other = make_workflow(stages=["only"], effect_stages=[], approval_stages=[])
    _, owner = make_operator("owner")
    _, picked = make_agent("picked")
    _, stranger = make_agent()
    waiters = _start([Waiter(server, stranger, 8, [other.slug]), Waiter(server, stranger, 8)])
    waiters += _start([Waiter(server, picked, 8)])

    status, run, _ = _call(server, "POST", "/api/v1/runs/", {"workflow": wanted.slug, "inputs": {}}, owner)
    assert status == 201
    waiters[2].join(3)
    assert waiters[2].status == 200 and waiters[2].body["id"] == run["id"]
    assert waiters[0].is_alive() and waiters[1].is_alive()


def test_a_refused_or_invalid_lease_does_not_wait(server):
    token = make_agent()[1]
    started = time.monotonic()
    assert _call(server, "POST", "/api/v1/runs/lease/", {"wait_seconds": 31}, token)[0] == 422
    assert _call(server, "POST", "/api/v1/runs/lease/", {"wait_seconds": 5})[0] == 401
    status, body, _ = _call(server, "POST", "/api/v1/runs/lease/", {"wait_seconds": 5, "workflows": ["nope"]}, token)
    assert (status, body["code"]) == (422, "unknown_workflow")
    assert time.monotonic() - started < 3


def _raw(port, data: bytes, then_close=True) -> bytes:
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        if then_close:
            sock.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
        return b"".join(chunks)


@pytest.mark.parametrize("path", ["/api/v1/runs/", "/api/v1/runs/lease/"])
def test_a_body_shorter_than_its_length_is_never_executed(server, path):
    from ledger.models import Run

    workflow = make_workflow(stages=["only"], effect_stages=[], approval_stages=[])
    token = make_agent()[1]
    body = json.dumps({"workflow": workflow.slug, "inputs": {}, "wait_seconds": 5}).encode()
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Token {token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body) + 40}\r\n\r\n").encode()
    answer = _raw(server, head + body)
    assert not answer or b" 400 " in answer.split(b"\r\n")[0]
    assert not Run.objects.filter(workflow=workflow).exists()


def test_a_chunked_body_over_the_limit_is_refused(server):
    token = make_agent()[1]
    chunk = b"x" * (settings.API_MAX_BODY_BYTES + 10)
    head = (f"POST /api/v1/runs/lease/ HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Token {token}\r\n"
            "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n").encode()
    answer = _raw(server, head + f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n0\r\n\r\n", then_close=False)
    assert answer.split(b"\r\n")[0].endswith(b"413 Request Entity Too Large") or b" 413 " in answer[:20]
    assert b"body_too_large" in answer
