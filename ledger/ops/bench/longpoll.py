"""``bench longpoll`` (SPEC §11.3): a sequential client's ``/healthz`` and append latency with no waiters,
then with ``--waiters`` (200) concurrent ``POST /runs/lease/`` calls waiting 30 s — asyncio clients, or
with ``--threads`` synchronous clients each on a thread of its own; each waiter's answer time beside its
``wait_seconds``, and how soon a newly queued run is leased.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

from ledger.models import Workflow
from ledger.ops.bench.appends import web_server
from ledger.ops.bench.common import BenchError, Out, Report, Row, loadavg, percentile, ratio, verdict
from ledger.ops.bench.fleet import FLEET_STAGES, FLEET_WORKFLOW, Http, _event, _setup

LONGPOLL_RATIO_TARGET = 2.0



async def _sequential(base: str, token: str, run_id: str, calls: int) -> tuple[list[float], list[float]]:
    http = Http(base, token)
    health, appends = [], []
    try:
        for _ in range(calls):
            began = time.monotonic()
            status, _ = await http.call("GET", "/healthz")
            health.append((time.monotonic() - began) * 1000)
            if status not in (200, 503):
                raise BenchError(f"/healthz answered {status}")
            began = time.monotonic()
            status, body = await http.call("POST", f"/api/v1/runs/{run_id}/events/", {
                "client_event_id": uuid.uuid4().hex, "stage": FLEET_STAGES[0], "kind": "proposed",
                "data": {"proposal": "try again"}})
            appends.append((time.monotonic() - began) * 1000)
            if status != 201:
                raise BenchError(f"an append answered {status}: {body}")
    finally:
        await http.close()
    return health, appends


async def _waiter(base: str, token: str, wait: float, slug: str) -> tuple[int, float]:
    http = Http(base, token)
    try:
        http.reader, http.writer = await asyncio.open_connection(http.host, http.port)  # timed from the send
        http.used = began = time.monotonic()
        status, _ = await http.call("POST", "/api/v1/runs/lease/", {"workflows": [slug], "wait_seconds": wait})
        return status, time.monotonic() - began
    finally:
        await http.close()


def _thread_waiter(base: str, token: str, wait: float, slug: str) -> tuple[int, float]:
    """A synchronous client's long-poll, on a thread of its own."""
    parts = urlsplit(base)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=wait + 30)
    try:
        conn.connect()  # timed from the send: a thousand connects at once may wait on the listen queue
        began = time.monotonic()
        conn.request("POST", "/api/v1/runs/lease/", body=json.dumps({"workflows": [slug], "wait_seconds": wait}),
                     headers={"Authorization": f"Token {token}", "Content-Type": "application/json"})
        response = conn.getresponse()
        response.read()
        return response.status, time.monotonic() - began
    finally:
        conn.close()


async def _longpoll(base: str, token: str, owner: str, run_id: str, waiters: int, calls: int, wait: float,
                    threads: bool):
    await _sequential(base, token, run_id, 30)  # warm-up: the workers' first requests import and connect
    quiet = await _sequential(base, token, run_id, calls)
    slug = f"{FLEET_WORKFLOW}-idle"
    if threads:
        pool = ThreadPoolExecutor(waiters, thread_name_prefix="agent")
        loop = asyncio.get_running_loop()
        started = [asyncio.ensure_future(loop.run_in_executor(pool, _thread_waiter, base, token, wait, slug))
                   for _ in range(waiters)]
    else:
        started = [asyncio.create_task(_waiter(base, token, wait, slug)) for _ in range(waiters)]
    await asyncio.sleep(min(5.0, wait / 3))  # every waiter has been looked at once and is parked
    loaded = await _sequential(base, token, run_id, calls)
    # a run queued now is leased by one of them within a second
    queued_at = time.monotonic()
    http = Http(base, owner)
    status, _ = await http.call("POST", "/api/v1/runs/", {"workflow": slug, "intent": uuid.uuid4().hex, "inputs": {}})
    await http.close()
    if status != 201:
        raise BenchError(f"queueing a run answered {status}")
    done, _ = await asyncio.wait(started, return_when=asyncio.FIRST_COMPLETED)
    leased_after = time.monotonic() - queued_at
    results = [task.result() for task in done] + [await task for task in started if task not in done]
    return quiet, loaded, leased_after, results


def run_longpoll(*, out, db_name: str, waiters: int = 200, calls: int = 500, wait: float = 30.0,
                 threads: bool = False) -> Report:
    """``wait``: the waiters' ``wait_seconds`` (30 by SPEC §11.3; the smoke test uses less); ``threads``:
    each waiter a synchronous client on a thread of its own, else an asyncio task."""
    from ledger import services

    say, report = Out(out), Report()
    tokens, owner, agent = _setup(1)
    Workflow.objects.get_or_create(slug=f"{FLEET_WORKFLOW}-idle", defaults={
        "title": "Bench idle", "stages": FLEET_STAGES, "effect_stages": [], "approval_stages": []})
    run, _ = services.run_trigger(workflow_slug=FLEET_WORKFLOW, inputs={}, intent=uuid.uuid4().hex, trigger="api",
                                  trigger_key=None, env_fingerprint="", actor=agent)
    services.event_append(run_id=run.id, body=_event(FLEET_STAGES[0], "started", None), actor=agent)
    say(f"bench longpoll: {calls} /healthz + {calls} appends, sequential, alone and beside {waiters} leases "
        f"waiting {wait:.0f} s ({'each on a thread' if threads else 'asyncio clients'}); load {loadavg()}")
    with web_server(db_name, say, "granian") as base:
        quiet, loaded, leased_after, results = asyncio.run(
            _longpoll(base, tokens[0], owner, str(run.id), waiters, calls, wait, threads))
    for name, alone, beside in (("/healthz", quiet[0], loaded[0]), ("append", quiet[1], loaded[1])):
        base95, p95 = percentile(alone, 95), percentile(beside, 95)
        r = ratio(p95, base95)
        report.add(Row(f"{name} p95 beside {waiters} waiting leases", f"{p95:.2f} ms", f"{base95:.2f} ms alone",
                       f"{r:.2f}x", f"≤ {LONGPOLL_RATIO_TARGET:.0f}x", verdict(r <= LONGPOLL_RATIO_TARGET)))
        report.figures[name] = r
    late = max(took - wait for status, took in results if status == 204)
    leased = sum(status == 200 for status, _ in results)
    report.add(Row("waiters answered (204) after wait_seconds +", f"{late:.2f} s", target="≤ 1 s", verdict=verdict(late <= 1)))
    report.add(Row("newly queued run leased after", f"{leased_after:.2f} s", target="≤ 1 s",
                   verdict=verdict(leased_after <= 1 and leased == 1)))
    report.figures.update(late=late, leased_after=leased_after, leased=leased)
    say("")
    for line in report.table():
        say(line)
    return report
