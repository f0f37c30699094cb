"""The web tier under a client's faults: a long-poll whose client went away is never given a run (and a
lease granted as it went is given back), and a body refused before it was read leaves nothing behind on a
kept-alive connection."""

import asyncio
import json
import socket
import threading
import time

import pytest
from django.conf import settings
from django.db import connection, connections

from ledger.models import LedgerEvent, Run
from stateboard.waits import LEASE_PATH
from tests.factories import client_for, make_agent, make_operator, make_workflow, unique
from tests.stateboard.test_web_tier import _call, server  # noqa: F401  (the granian fixture of this test process)

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _lease_head(token: str, length: int, path: str = LEASE_PATH) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Token {token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n").encode()


def _queue_runs(workflow, count: int) -> list[str]:
    """Runs a person triggered: queued for any agent."""
    _, owner = make_operator("owner")
    ids = []
    for n in range(count):
        response = client_for(owner).post("/api/v1/runs/", {"workflow": workflow.slug, "intent": f"i{n}",
                                                             "inputs": {"n": n}}, format="json")
        assert response.status_code == 201 and response.json()["queued"], response.content
        ids.append(response.json()["id"])
    return ids


def _leased_to(agent: str) -> int:
    return LedgerEvent.objects.filter(kind="leased", data__owner=f"agent:{agent}").count()


# ---------------------------------------------------------------- the long-poll's client went away

def test_long_polls_whose_clients_went_away_lease_nothing(server):  # noqa: F811
    """Ten agents' long-polls close their connections; five runs queued afterwards all go to a live agent."""
    workflow = make_workflow(stages=["only"], effect_stages=[], approval_stages=[])
    gone_name = unique("gone")
    _, gone = make_agent(gone_name)
    _, live = make_agent()
    body = json.dumps({"workflows": [workflow.slug], "wait_seconds": 25}).encode()
    polls = [socket.create_connection(("127.0.0.1", server), timeout=10) for _ in range(10)]
    for poll in polls:
        poll.sendall(_lease_head(gone, len(body)) + body)
    time.sleep(1.5)  # each has looked once and waits
    for poll in polls:
        poll.close()
    time.sleep(1.0)  # the server has seen them go
    queued = _queue_runs(workflow, 5)
    time.sleep(1.0)  # any wake-up has reached whoever it went to
    leased = [_call(server, "POST", LEASE_PATH, {"workflows": [workflow.slug]}, live) for _ in range(5)]
    assert [status for status, _, _ in leased] == [200] * 5, leased
    assert sorted(body["id"] for _, body, _ in leased) == sorted(queued)
    assert _leased_to(gone_name) == 0


def test_a_lease_granted_as_its_client_goes_is_given_back():
    """The ASGI entry with Django's app, in this process: the client goes away while its woken long-poll
    looks (on a web thread, as it starts) and is granted a run. The lease is given back at once (`released`), and a
    live agent leases the run."""
    from django.core.signals import request_started
    from django.core.wsgi import get_wsgi_application

    from stateboard.asgi import WsgiOnThreads
    from stateboard.waits import LeaseWaitingApp, LeaseWaits

    workflow = make_workflow(stages=["only"], effect_stages=[], approval_stages=[])
    gone_name = unique("gone")
    _, gone = make_agent(gone_name)
    _, live = make_agent()
    limit = settings.API_MAX_BODY_BYTES
    django_app = get_wsgi_application()

    def wsgi(environ, start_response):  # each look on a connection of its own, closed after it
        try:
            return list(django_app(environ, start_response))
        finally:
            connections.close_all()

    waits = LeaseWaits(listen=True)
    waits._listener_ensure = lambda: None  # no LISTEN: this test wakes the waiter itself
    app = LeaseWaitingApp(WsgiOnThreads(wsgi, 2, limit), waits, limit)
    body = json.dumps({"workflows": [workflow.slug], "wait_seconds": 10}).encode()
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": LEASE_PATH, "raw_path": LEASE_PATH.encode(), "query_string": b"", "root_path": "",
             "server": ("127.0.0.1", 80), "client": ("127.0.0.1", 50000),
             "headers": [(b"host", b"127.0.0.1"), (b"authorization", f"Token {gone}".encode()),
                         (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]}

    async def scenario():
        loop = asyncio.get_running_loop()
        went, armed, sent = asyncio.Event(), threading.Event(), []
        messages = [{"type": "http.request", "body": body, "more_body": False}]

        async def receive():
            if messages:
                return messages.pop(0)
            await went.wait()
            return {"type": "http.disconnect"}

        async def send(message):
            sent.append(message)

        def look_starts(**kwargs):  # on the web thread, as the look begins: the client goes now
            if armed.is_set():
                loop.call_soon_threadsafe(went.set)

        request_started.connect(look_starts, weak=False, dispatch_uid="test-client-goes")
        try:
            request = asyncio.create_task(app(scope, receive, send))
            for _ in range(100):  # it looks once, finds nothing and waits
                if waits.queue or request.done():
                    break
                await asyncio.sleep(0.1)
            assert not request.done() and len(waits.queue) == 1
            queued = await loop.run_in_executor(None, _queue_in_thread, workflow)
            armed.set()
            waits.notify(workflow.slug)  # as the run's NOTIFY would: it looks again, and the client goes
            await asyncio.wait_for(request, 10)
            return queued, sent
        finally:
            request_started.disconnect(dispatch_uid="test-client-goes")

    queued, sent = asyncio.run(scenario())
    assert sent[0]["status"] == 204  # (nobody reads it)
    kinds = list(LedgerEvent.objects.filter(run_id=queued).order_by("seq").values_list("kind", "actor", "reason_code"))
    assert kinds[-2:] == [("leased", f"agent:{gone_name}", ""), ("released", "system:web", "answer_undelivered")]
    run = Run.objects.get(id=queued)
    assert run.lease_owner == "" and run.queued_until is not None
    leased = client_for(live).post("/api/v1/runs/lease/", {"workflows": [workflow.slug]}, format="json")
    assert leased.status_code == 200 and leased.json()["id"] == queued


def _queue_in_thread(workflow) -> str:
    try:
        return _queue_runs(workflow, 1)[0]
    finally:
        connection.close()


# ---------------------------------------------------------------- a 413 on a kept-alive connection

def _response(reader) -> tuple[int, dict, bytes]:
    """One HTTP/1.1 response from a connection's reader: (status, headers, body); (0, {}, b"") at its end."""
    status_line = reader.readline()
    if not status_line:
        return 0, {}, b""
    headers = {}
    while (line := reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(status_line.split()[1]), headers, reader.read(int(headers.get("content-length", 0)))


def _sending(sock, data: bytes) -> threading.Thread:
    """Send ``data`` on a thread (a server that stops reading must not block the test)."""

    def send():
        try:
            sock.sendall(data)
        except OSError:
            pass

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    return sender


@pytest.mark.parametrize("path", ["/api/v1/runs/", LEASE_PATH])
def test_a_413_leaves_nothing_of_its_body_on_a_kept_alive_connection(server, path):  # noqa: F811
    """A 3 MB body, and behind it on the same connection, at once and then again after its answer, a
    request that must be answered as itself (never parsed from the leftover body)."""
    token = make_agent()[1]
    big = b'{"inputs": {"pad": "' + b"{" * (3 * 1024 * 1024) + b'"}}'
    following = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    with socket.create_connection(("127.0.0.1", server), timeout=20) as sock:
        reader = sock.makefile("rb")
        sender = _sending(sock, _lease_head(token, len(big), path) + big + following)
        status, headers, body = _response(reader)
        assert (status, json.loads(body)["code"]) == (413, "body_too_large"), (status, body[:200])
        sender.join(10)
        status, headers_after, _ = _response(reader)
        if headers.get("connection") == "close":  # allowed: the server says it closes
            assert status == 0
            return
        assert status in (200, 503), status  # /healthz, answered as itself
        sock.sendall(following)
        assert _response(reader)[0] in (200, 503)


def test_a_body_too_large_to_drop_in_time_is_answered_and_the_connection_closed(server):  # noqa: F811
    """A client that declares 100 MB and sends 3 MB: 413 within the drop's time, then the connection closes
    (and says so)."""
    token = make_agent()[1]
    with socket.create_connection(("127.0.0.1", server), timeout=20) as sock:
        reader = sock.makefile("rb")
        started = time.monotonic()
        _sending(sock, _lease_head(token, 100 * 1024 * 1024, "/api/v1/runs/") + b"x" * (3 * 1024 * 1024))
        status, headers, body = _response(reader)
        assert (status, json.loads(body)["code"]) == (413, "body_too_large")
        assert headers.get("connection") == "close" and time.monotonic() - started < 8
        assert _response(reader)[0] == 0  # closed
