"""The fleet: one process per agent identity, fed scenarios through a queue; the parent keeps the score.

The parent runs with the server's settings and database: it reads final states and the duplicate-effect
figure from the ledger, and (``--once`` only) performs an executor pass itself for a run the executor
has held for a while when no Celery worker seems to be running (the pass is idempotent, so a worker
that shows up late finds the stage done).
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import random
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from ledger.ops.demo.agent import Agent
from ledger.ops.demo.scenarios import PROMISED, SCENARIOS, note, tend

EXECUTOR_GRACE_SECONDS = 6
PASS_TIMEOUT_SECONDS = 300
STOP_GRACE_SECONDS = 1.0  # on stop, an agent still busy this long after being asked is terminated


LEASED = "leased"  # a result the agent found itself between scenarios (not one the parent handed out)


def agent_main(url: str, name: str, token: str, editor_token: str, pace: float, executors: dict,
               tasks, results, lease_wait: float = 0.0) -> None:
    """An agent process: take (scenario, tag) items until ``None``; put (scenario, records) back. With
    ``lease_wait``, between items it long-polls for queued runs (a human's retry, a schedule tick) and
    goes on with its own runs a human approved meanwhile, as a real agent would."""
    agent = Agent(url, name, token, editor_token, pace=pace, executors=executors)
    parent = os.getppid()
    try:
        while True:
            try:
                item = tasks.get(timeout=0.1 if lease_wait else 2)
            except queue.Empty:
                if os.getppid() != parent:
                    break  # the fleet's parent died without stopping us
                if lease_wait:
                    _serve_between(agent, lease_wait, results)
                continue
            if item is None:
                break
            scenario, tag = item
            try:
                records = (tend if scenario == "tend" else SCENARIOS[scenario])(agent, tag)
            except Exception as exc:  # a scenario that breaks is reported, the agent goes on
                records = [{"scenario": scenario, "agent": name, "error": f"{type(exc).__name__}: {exc}"}]
            results.put((scenario, [{**r, "agent": name} for r in records]))
    except KeyboardInterrupt:
        pass
    finally:
        agent.close()


def _serve_between(agent: Agent, lease_wait: float, results) -> None:
    try:
        records = [note("leased", run, None, detail=run.state) for run in agent.tend(wait_seconds=lease_wait)]
    except Exception as exc:  # the server restarting, say: try again on the next pass
        records = [{"scenario": "leased", "error": f"{type(exc).__name__}: {exc}"}]
        time.sleep(1)
    if records:
        results.put((LEASED, [{**r, "agent": agent.name} for r in records]))


@dataclass
class Fleet:
    url: str
    agents: dict[str, str]  # name -> token
    editor_token: str
    executors: dict[str, list[str]]
    pace: float = 0.0
    lease_wait: float = 0.0  # > 0: idle agents long-poll for queued runs (the living fleet)
    out: object = print
    procs: list = field(default_factory=list)

    def start(self) -> None:
        ctx = multiprocessing.get_context("spawn")  # no inherited sockets, threads or DB connections
        self.tasks, self.results = ctx.Queue(), ctx.Queue()
        for name, token in self.agents.items():
            proc = ctx.Process(target=agent_main, name=name, daemon=True,
                               args=(self.url, name, token, self.editor_token, self.pace, self.executors,
                                     self.tasks, self.results, self.lease_wait))
            proc.start()
            self.procs.append(proc)

    def stop(self, grace: float = STOP_GRACE_SECONDS) -> None:
        """Ask every agent to stop (an idle one does at once); one still busy ``grace`` seconds later (in a
        scenario, or retrying a server that is stopping too) is terminated, as a real agent may die: it
        holds nothing a crash would not leave (a lease lapses, a step is done again or verified)."""
        for _ in self.procs:
            self.tasks.put(None)
        deadline = time.monotonic() + grace
        for proc in self.procs:
            proc.join(timeout=max(0.0, deadline - time.monotonic()))
        for proc in self.procs:
            if proc.is_alive():
                proc.terminate()
        for proc in self.procs:
            proc.join(timeout=5)
        self.procs = []

    def play(self, scenarios: list[str], tag: str, *, executor_fallback: bool = False,
             timeout: float = PASS_TIMEOUT_SECONDS) -> list[dict]:
        """Hand out the scenarios and collect every record (in the order they finish)."""
        for name in scenarios:
            self.tasks.put((name, tag))
        records, waiting, deadline = [], len(scenarios), time.monotonic() + timeout
        while waiting:
            if time.monotonic() > deadline:
                records.append({"scenario": "fleet", "error": f"{waiting} scenario(s) did not finish in {timeout:.0f} s"})
                break
            if not any(p.is_alive() for p in self.procs):
                records.append({"scenario": "fleet", "error": "every agent process exited"})
                break
            try:
                scenario, got = self.results.get(timeout=1)
            except queue.Empty:
                if executor_fallback:
                    executor_nudge()
                continue
            if scenario != LEASED:
                waiting -= 1
            records.extend(got)
            for record in got:
                self.out(line_for(record))
        return records

    def listen(self, seconds: float) -> None:
        """Between rounds: print what the agents lease and finish by themselves."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                _, got = self.results.get(timeout=min(left, 1))
            except queue.Empty:
                continue
            for record in got:
                self.out(line_for(record))


def executor_nudge() -> int:
    """An executor pass for runs the executor has held past the grace period (no worker seems to run)."""
    from django.utils.dateparse import parse_datetime  # (d) spawned agents import this module: no Django

    from ledger import services  # (d)
    from ledger.models import Approval, Run  # (d)
    from ledger.services import EXECUTOR  # (d)

    done = 0
    now = datetime.now(timezone.utc)
    for run in Run.objects.filter(lease_owner=EXECUTOR)[:20]:
        state = run.executor_state or {}
        stage, since = state.get("stage"), parse_datetime(state.get("since") or "")
        if not stage or not since or now - since <= timedelta(seconds=EXECUTOR_GRACE_SECONDS):
            continue
        if run.state == "awaiting_approval" and not Approval.objects.filter(
                run=run, stage=stage, status="approved", consumed_at__isnull=True).exists():
            continue  # still waiting for a human, not for a worker
        services.executor_run(run_id=run.id, stage=stage)
        done += 1
    return done


def line_for(record: dict) -> str:
    if record.get("error"):
        return f"  ! {record['scenario']:<20} {record.get('agent', '')}: {record['error']}"
    fault = f"  [{record['fault']}]" if record.get("fault") else ""
    decision = f"{record['outcome']}/{record['reason']}" if record.get("outcome") else "-"
    detail = f"  {record['detail']}" if record.get("detail") else ""
    return f"  {record['scenario']:<20} {record['run'][:8]} {decision:<45}{fault}{detail}"


def round_tag(now: datetime | None = None) -> str:
    """A date-like intent suffix, unique per round (the living fleet's 'today')."""
    now = now or datetime.now(timezone.utc)
    return now.strftime("%Y-%m-%d-%H%M%S") + f"-{random.randint(0, 999):03d}"


def summarize(records: list[dict], since: datetime) -> tuple[list[str], list[str]]:
    """The summary lines (scenario → run, decision, final state) and the check's failures."""
    from ledger import metrics_selectors  # (d) spawned agents import this module: no Django
    from ledger.models import Run  # (d)

    ids = [r["run"] for r in records if r.get("run")]
    states = dict(Run.objects.filter(id__in=ids).values_list("id", "state"))
    lines = [f"{'scenario':<20} {'run':<36} {'decision':<45} {'final state':<18} fault"]
    for r in records:
        if r.get("run"):
            decision = f"{r['outcome']}/{r['reason']}"
            lines.append(f"{r['scenario']:<20} {r['run']:<36} {decision:<45} "
                         f"{states.get(_uuid(r['run']), '?'):<18} {r.get('fault') or ''}")
    failures = [f"{r['scenario']}: {r['error']}" for r in records if r.get("error")]
    produced = {r.get("fault") for r in records}
    failures += [f"fault not produced: {name} ({what})" for name, what in PROMISED.items() if name not in produced]
    twice = metrics_selectors.metrics(since=since)["duplicate_side_effects"]
    lines.append(f"check: {twice} effect(s) executed twice; "
                 f"{len(set(PROMISED) & produced)}/{len(PROMISED)} promised faults produced")
    if twice:
        failures.append(f"{twice} effect(s) executed twice")
    return lines, failures


def _uuid(text: str):
    return uuid.UUID(text)
