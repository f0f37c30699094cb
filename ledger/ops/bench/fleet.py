"""``bench fleet``: the web tier as ``up`` starts it, loaded the way a fleet loads it (``bench longpoll`` is
in ``longpoll``).

``fleet`` (issue 30): N simulated agents at a language model's pace over HTTP, N stepped up. Half of
them trigger their own runs, half long-poll ``lease`` for runs a human queues (a feeder queues them as
fast as those agents finish); each posts one event every 1-3 s with jitter (a stage's ``started`` and
``succeeded``), with a long-poll waiting between runs. Per N: append p95, trigger → decision p95 (the
trigger's own answer: the decision is committed before it answers), lease wait, errors, and the web
server's and database's CPU (the PostgreSQL backends of the scratch database and the server's own
processes, not other databases' backends). The largest N whose append p95 is ≤ 50 ms with no error is the
fleet's capacity on this machine, which the load generator shares. The feeder keeps a backlog of queued
runs (about one per twenty leasing agents), so the lease wait is what an agent waits while runs are queued,
not how fast a human queues them. Each step also prints the web server's and the database's CPU ms per
request (all requests of the step's window: appends, triggers, lease looks, the feeder's).

The load generator is one asyncio process with a hand-written HTTP/1.1 client on keep-alive
connections (one per agent), so it spends little of the CPU it shares with what it measures.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import time
import uuid
from collections import Counter
from urllib.parse import urlsplit

from ledger.identities import agent_create, operator_create
from ledger.models import Workflow
from ledger.ops.bench import tracing as tracing_bench
from ledger.ops.bench.appends import web_server
from ledger.ops.bench.common import (
    BenchError,
    Out,
    Report,
    Row,
    database_url,
    loadavg,
    percentile,
    raw_connect,
    verdict,
)
from stateboard.roles import actor_for

FLEET_WORKFLOW = "bench-fleet"
FLEET_STAGES = ["plan", "act", "report"]
APPEND_P95_TARGET_MS = 50.0
TRIGGER_P95_TARGET_MS = 100.0
LEASE_WAIT_P95_TARGET_S = 1.0
DEFAULT_STEPS = (100, 250, 500, 750, 1000)
IDLE_RECONNECT = 3.0  # granian closes a keep-alive connection idle for 5 s
REQUESTS: Counter = Counter()  # requests sent by kind (and connections opened), reset at each step


class Http:
    """An HTTP/1.1 keep-alive connection of one simulated agent (asyncio streams)."""

    def __init__(self, base: str, token: str):
        parts = urlsplit(base)
        self.host, self.port = parts.hostname, parts.port
        self.head = (f"Host: {self.host}:{self.port}\r\nAuthorization: Token {token}\r\n"
                     "Content-Type: application/json\r\n")
        self.reader = self.writer = None
        self.used = 0.0

    async def call(self, method: str, path: str, body=None) -> tuple[int, dict | None]:
        for attempt in (1, 2):  # a keep-alive connection the server closed meanwhile: once more, fresh
            try:
                if self.writer is None or time.monotonic() - self.used > IDLE_RECONNECT:
                    await self.close()
                    self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
                    REQUESTS["connections"] += 1
                data = b"" if body is None else json.dumps(body).encode()
                REQUESTS[_kind(method, path)] += 1
                self.writer.write(f"{method} {path} HTTP/1.1\r\n{self.head}Content-Length: {len(data)}\r\n\r\n"
                                  .encode() + data)
                status_line = await self.reader.readline()
                if not status_line:
                    raise ConnectionError("closed")
                length = 0
                while (line := await self.reader.readline()) not in (b"\r\n", b""):
                    name, _, value = line.partition(b":")
                    if name.lower() == b"content-length":
                        length = int(value)
                payload = await self.reader.readexactly(length) if length else b""
                self.used = time.monotonic()
                return int(status_line.split()[1]), (json.loads(payload) if payload else None)
            except (ConnectionError, asyncio.IncompleteReadError, OSError):
                await self.close()
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            try:
                await self.writer.wait_closed()
            except OSError:
                pass
        self.reader = self.writer = None


def _kind(method: str, path: str) -> str:
    if path.endswith("/events/"):
        return "appends"
    if path.endswith("/lease/"):
        return "lease looks"
    return "triggers" if method == "POST" and path.endswith("/runs/") else "other"


# ---------------------------------------------------------------------------------------------
# CPU of the web server and of the database server


def _ticks(pids) -> dict[int, float]:
    """Each process's CPU seconds so far (utime + stime); a process gone meanwhile is left out."""
    found = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            found[pid] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            pass
    return found


def _spent(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds spent between two readings by the processes alive at the second (a process that ended
    meanwhile takes its seconds with it, so a sum of totals could go down)."""
    return sum(seconds - before.get(pid, 0.0) for pid, seconds in after.items())


def _descendants(pid: int) -> list[int]:
    found, frontier = [pid], [pid]
    while frontier:
        parent = frontier.pop()
        try:
            with open(f"/proc/{parent}/task/{parent}/children") as children:
                kids = [int(k) for k in children.read().split()]
        except OSError:
            kids = []
        found += kids
        frontier += kids
    return found


def _postgres_pids(db_name: str) -> list[int]:
    """The database server's processes that work for the bench: the backends connected to its scratch
    database and the server's own (WAL writer, checkpointer…), not other databases' backends."""
    with raw_connect(autocommit=True) as conn:
        rows = conn.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s OR backend_type <> 'client backend'",
                            [db_name]).fetchall()
    return [pid for (pid,) in rows]


def _machine() -> tuple[int, int]:
    """The machine's busy and total jiffies so far, all cores (``/proc/stat``; idle and iowait are not busy)."""
    with open("/proc/stat") as stat:
        fields = [int(x) for x in stat.readline().split()[1:9]]
    return sum(fields) - fields[3] - fields[4], sum(fields)


class Cpu:
    """Cores used over a window by the web server's processes and by the database server's for the bench."""

    def __init__(self, web_pid: int, db_name: str):
        self.web_pid, self.db_name = web_pid, db_name

    def start(self):
        self.began, self.machine0 = time.monotonic(), _machine()
        self.web0, self.db0 = _ticks(_descendants(self.web_pid)), _ticks(_postgres_pids(self.db_name))

    def stop(self) -> tuple[float, float]:
        self.elapsed = elapsed = time.monotonic() - self.began
        busy, total = (after - before for after, before in zip(_machine(), self.machine0))
        self.machine_busy = busy / total if total else 0.0  # of every core, by anything (the kernel included)
        return (_spent(self.web0, _ticks(_descendants(self.web_pid))) / elapsed,
                _spent(self.db0, _ticks(_postgres_pids(self.db_name))) / elapsed)


# ---------------------------------------------------------------------------------------------
# the world


def _setup(agents: int) -> tuple[list[str], str, str]:
    """The fleet's workflow, ``agents`` agent tokens, an owner's token, and the first agent's actor."""
    Workflow.objects.get_or_create(slug=FLEET_WORKFLOW, defaults={
        "title": "Bench fleet", "stages": FLEET_STAGES, "effect_stages": [], "approval_stages": [],
        "lease_seconds": 600})
    run_tag = uuid.uuid4().hex[:6]
    made = [agent_create(name=f"fleet-{run_tag}-{i}") for i in range(agents)]
    _, owner = operator_create(name=f"fleet-owner-{run_tag}", role="owner", with_token=True)
    return [token for _, token in made], owner, actor_for(made[0][0].user)


def _event(stage: str, kind: str, lease_id: str | None) -> dict:
    body = {"client_event_id": uuid.uuid4().hex, "stage": stage, "kind": kind}
    if lease_id:
        body["lease_id"] = lease_id
    return body


class Step:
    """What one step's agents saw (after its warm-up)."""

    def __init__(self):
        self.append_ms, self.trigger_ms, self.lease_wait_s = [], [], []
        self.queued = self.leased = 0  # runs the feeder queued, runs the leasing agents got
        self.errors: dict[str, int] = {}
        self.counting = False

    def error(self, what: str) -> None:
        if self.counting:
            self.errors[what] = self.errors.get(what, 0) + 1


async def _drive(http: Http, run: dict, step: Step, stop: asyncio.Event) -> None:
    lease_id = (run.get("lease") or {}).get("id")
    for stage in FLEET_STAGES:
        for kind in ("started", "succeeded"):
            await asyncio.sleep(random.uniform(1.0, 3.0))  # the model thinks
            if stop.is_set():
                return
            began = time.monotonic()
            status, body = await http.call("POST", f"/api/v1/runs/{run['id']}/events/", _event(stage, kind, lease_id))
            if status == 201:
                if step.counting:
                    step.append_ms.append((time.monotonic() - began) * 1000)
            else:
                step.error(f"event {status} {(body or {}).get('code', '')}")
                return


async def _agent(base: str, token: str, triggers: bool, step_of, stop: asyncio.Event, serial: int,
                 lease_wait: float = 10.0) -> None:
    http = Http(base, token)
    await asyncio.sleep(random.uniform(0, 3.0))  # agents start spread out, as a fleet does
    n = 0
    try:
        while not stop.is_set():
            step = step_of()
            try:
                if triggers:
                    n += 1
                    began = time.monotonic()
                    status, run = await http.call("POST", "/api/v1/runs/", {
                        "workflow": FLEET_WORKFLOW, "intent": f"agent-{serial}-{uuid.uuid4().hex[:8]}-{n}", "inputs": {}})
                    if status != 201:
                        step.error(f"trigger {status}")
                        await asyncio.sleep(1)
                        continue
                    if step.counting:
                        step.trigger_ms.append((time.monotonic() - began) * 1000)
                else:
                    began, backlog = time.monotonic(), step.queued > step.leased
                    status, run = await http.call("POST", "/api/v1/runs/lease/",
                                                  {"workflows": [FLEET_WORKFLOW], "wait_seconds": lease_wait})
                    if status == 204:
                        continue
                    if status != 200:
                        step.error(f"lease {status}")
                        await asyncio.sleep(1)
                        continue
                    step.leased += 1
                    if step.counting and backlog:  # waits while runs are queued
                        step.lease_wait_s.append(time.monotonic() - began)
                await _drive(http, run, step, stop)
            except (ConnectionError, asyncio.IncompleteReadError, OSError) as exc:
                step.error(type(exc).__name__)
                await asyncio.sleep(1)
    finally:
        await http.close()


async def _feeder(base: str, owner: str, leasers: int, step_of, stop: asyncio.Event) -> None:
    """Queues runs for the leasing agents as a human would (a trigger by an operator is queued), keeping
    a backlog of about one queued run per twenty leasing agents: the leasing agents set the pace."""
    http = Http(base, owner)
    backlog = max(2, leasers // 20)
    try:
        while not stop.is_set():
            step = step_of()
            if step.queued - step.leased >= backlog:
                await asyncio.sleep(0.05)
                continue
            status, _ = await http.call("POST", "/api/v1/runs/", {
                "workflow": FLEET_WORKFLOW, "intent": f"queued-{uuid.uuid4().hex}", "inputs": {}})
            if status == 201:
                step.queued += 1
            else:
                step.error(f"queue {status}")
                await asyncio.sleep(1)
    finally:
        await http.close()


async def _fleet_step(base: str, tokens: list[str], owner: str, seconds: float, warmup: float) -> Step:
    step, stop = Step(), asyncio.Event()
    leasers = len(tokens) // 2
    lease_wait = min(10.0, max(1.0, seconds / 3))
    tasks = [asyncio.create_task(_agent(base, token, i >= leasers, lambda: step, stop, i, lease_wait))
             for i, token in enumerate(tokens)]
    tasks.append(asyncio.create_task(_feeder(base, owner, leasers, lambda: step, stop)))
    await asyncio.sleep(warmup)
    step.counting = True
    await asyncio.sleep(seconds)
    step.counting = False
    stop.set()
    await asyncio.wait(tasks, timeout=lease_wait + 2)
    for task in tasks:
        task.cancel()
    return step


def _ms(values) -> str:
    return f"{percentile(values, 95):.1f} ms" if values else "—"


def run_fleet(*, out, db_name: str, steps=DEFAULT_STEPS, seconds: float = 30.0, warmup: float | None = None,
              tracing: str = "off", statements=None) -> Report:
    """``tracing``: ``off``, ``on`` (the trace export running beside the fleet) or ``both`` (each N without,
    then with it: ``ledger.ops.bench.tracing``); ``statements``: a private cluster's figures
    (``ledger.ops.bench.cluster``), printed for each step."""
    say, report = Out(out), Report()
    warmup = min(8.0, seconds / 2) if warmup is None else warmup
    tokens, owner, _ = _setup(max(steps))
    modes = ("off", "on") if tracing == "both" else (tracing,)
    say(f"bench fleet: steps {', '.join(map(str, steps))} agents, {seconds:.0f} s each after {warmup:.0f} s of warm-up"
        f"{', trace export ' + ' then '.join(modes) + ' at each N' if tracing != 'off' else ''}; load {loadavg()}")
    with web_server(db_name, say, "granian") as base, contextlib.ExitStack() as stack:
        exporter = collector = None
        if tracing != "off":
            collector = stack.enter_context(tracing_bench.Collector())
            exporter = tracing_bench.Exporter(database_url(db_name), collector.endpoint,
                                             every=min(tracing_bench.EVERY, seconds / 2))
            stack.callback(exporter.stop)
            say(f"trace export: a pass every {exporter.every:g} s to the collector at {collector.endpoint}")
        web_pid = _web_pid(base)
        best = dict.fromkeys(modes, 0)
        for n in steps:
            for mode in modes:
                if exporter is not None:
                    exporter.resume(mark_behind=tracing == "both") if mode == "on" else exporter.pause()
                ok, errors = _step(say, report, base, web_pid, db_name, tokens[:n], owner, seconds, warmup,
                                   label=f"N={n:>5}" + (f", tracing {mode}" if tracing != "off" else ""),
                                   exporter=exporter if mode == "on" else None, collector=collector,
                                   statements=statements)
                best[mode] = n if ok else best[mode]
            if not ok and errors:
                break
    for mode in modes:
        label = f" with tracing {mode}" if tracing != "off" else ""
        report.add(Row(f"fleet capacity{label} (append p95 ≤ 50 ms, trigger p95 ≤ 100 ms, lease wait p95 ≤ 1 s, "
                       "no error)", f"{best[mode]} agents", target="≥ 500 (aim 1,000)", verdict=verdict(best[mode] >= 500)))
    report.figures["capacity"] = best[modes[-1]] if tracing != "both" else best["off"]
    if tracing != "off":
        report.figures["capacity_by_tracing"] = best
    say("")
    for line in report.table():
        say(line)
    return report


def _step(say, report: Report, base: str, web_pid: int, db_name: str, tokens: list[str], owner: str, seconds: float,
          warmup: float, *, label: str, exporter=None, collector=None, statements=None) -> tuple[bool, int]:
    """One step of ``len(tokens)`` agents: its lines printed, its row and figures in ``report``."""
    cpu = Cpu(web_pid, db_name)
    REQUESTS.clear()
    if statements is not None:
        statements.reset()
    cpu.start()
    generator = time.process_time()
    exported = _ticks([exporter.process.pid]) if exporter else {}
    taken = collector.taken() if collector else (0, 0)
    step = asyncio.run(_fleet_step(base, tokens, owner, seconds, warmup))
    web_cores, db_cores = cpu.stop()
    generator_cores = (time.process_time() - generator) / cpu.elapsed
    requests = sum(count for kind, count in REQUESTS.items() if kind != "connections")
    per_request = cpu.elapsed * 1000 / max(requests, 1)
    web_ms, db_ms = web_cores * per_request, db_cores * per_request
    errors = sum(step.errors.values())
    p95 = percentile(step.append_ms, 95) if step.append_ms else float("inf")
    trigger95 = percentile(step.trigger_ms, 95) if step.trigger_ms else 0.0
    lease95 = percentile(step.lease_wait_s, 95) if step.lease_wait_s else 0.0
    ok = (p95 <= APPEND_P95_TARGET_MS and trigger95 <= TRIGGER_P95_TARGET_MS
          and lease95 <= LEASE_WAIT_P95_TARGET_S and not errors)
    lease = f"{percentile(step.lease_wait_s, 95):.2f} s" if step.lease_wait_s else "—"
    say(f"  {label}: appends {len(step.append_ms):>6} p95 {_ms(step.append_ms):>9}, trigger→decision p95 "
        f"{_ms(step.trigger_ms):>9}, lease wait p95 (runs queued) {lease}, errors {errors} {step.errors or ''}, "
        f"web {web_cores:.2f} cores, db {db_cores:.2f} cores, machine {cpu.machine_busy:.0%} busy")
    say(f"          {requests / cpu.elapsed:.0f} requests/s ({', '.join(f'{k} {v}' for k, v in sorted(REQUESTS.items()))}); "
        f"per request: web CPU {web_ms:.2f} ms, database CPU {db_ms:.2f} ms; load generator {generator_cores:.2f} cores")
    if exporter is not None:
        export_cores = _spent(exported, _ticks([exporter.process.pid])) / cpu.elapsed
        requests_taken, spans = (a - b for a, b in zip(collector.taken(), taken))
        say(f"          trace export: {spans} spans in {requests_taken} requests to the collector, the exporter "
            f"{export_cores:.3f} cores (its database backend is in db)")
    if statements is not None:
        statements.report(say, requests)
    report.add(Row(f"fleet {label}: append p95", _ms(step.append_ms), target=f"≤ {APPEND_P95_TARGET_MS:.0f} ms",
                   verdict=verdict(ok)))
    report.figures[label] = {"append_p95_ms": p95, "trigger_p95_ms": percentile(step.trigger_ms, 95) if step.trigger_ms else None,
                             "errors": errors, "web_cores": web_cores, "db_cores": db_cores,
                             "web_ms": web_ms, "db_ms": db_ms,
                             "lease_wait_p95_s": percentile(step.lease_wait_s, 95) if step.lease_wait_s else None}
    return ok, errors


def _web_pid(base: str) -> int:
    """The granian process listening on ``base``'s port (the bench started it; found by its command line)."""
    port = str(urlsplit(base).port)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                    parts = cmdline.read().split(b"\0")
            except OSError:
                continue
            if b"granian" in b" ".join(parts) and port.encode() in parts:
                return int(entry)
    raise BenchError(f"no granian process found serving port {port}")
