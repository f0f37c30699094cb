"""Many instances on one PostgreSQL and one Redis (SPEC §13): two of each process kind, started with
`manage.py up --role web|worker|beat` as a deployment would, driven over HTTP through both web
instances. One run per trigger key and per schedule slot (both beats send each tick), one lease
holder, the executor's effect performed once, the sweeps of two beats on two workers without harm."""

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections import Counter
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from django.db import connection
from django.utils import timezone
from django_celery_beat.models import PeriodicTask

from ledger.models import Effect, LedgerEvent, Run
from ledger.schedules import periodic_tasks_ensure
from tests.factories import make_agent, make_operator, make_workflow
from tests.ledger.workers import wait_until

ROOT = Path(__file__).resolve().parents[2]
BROKER = settings.REDIS_URL
pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(connection.vendor != "postgresql", reason="many instances share PostgreSQL")]
ACTION = {"system": "cms", "operation": "publish", "target": "post-1", "summary": "Publish post 1"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Deployment:
    """Six `up --role` processes on this test's database and a Celery queue of their own."""

    def __init__(self, tmp_path: Path):
        db = connection.settings_dict
        self.queue = f"multi-{uuid.uuid4().hex[:10]}"
        self.env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
        self.env.update(DJANGO_SETTINGS_MODULE="stateboard.settings", CELERY_BROKER_URL=BROKER, REDIS_URL=BROKER,
                        CELERY_QUEUE=self.queue, WEB_WORKERS="1", WEB_THREADS="4", DB_POOL="0",
                        DATABASE_URL=f"postgres://{db['USER']}{':' + db['PASSWORD'] if db.get('PASSWORD') else ''}"
                                     f"@{db['HOST']}:{db['PORT']}/{db['NAME']}")
        self.tmp, self.procs, self.ports = tmp_path, [], []

    def start(self, role: str, n: int) -> None:
        port = _free_port()
        if role == "web":
            self.ports.append(port)
        env = {**self.env, "STATEBOARD_VAR_DIR": str(self.tmp / f"{role}-{n}")}  # a beat's schedule file each
        log = open(self.tmp / f"{role}-{n}.log", "w")
        self.procs.append((role, subprocess.Popen(
            [sys.executable, "manage.py", "up", "--role", role, "--port", str(port)], cwd=ROOT, env=env,
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)))

    def wait_serving(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        for port in self.ports:
            while True:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2):
                        break
                except OSError:
                    if time.monotonic() > deadline:
                        raise AssertionError(f"web on {port} never answered:\n{self.logs()}")
                    time.sleep(0.3)

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(self.tmp.glob("*.log")))

    def stop(self) -> None:
        for _, proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for _, proc in self.procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        import redis

        redis.Redis.from_url(BROKER).delete(self.queue)


def _wait(predicate, what: str, timeout: float, deployment: Deployment) -> None:
    if not wait_until(predicate, timeout=timeout, step=0.5):
        raise AssertionError(f"timed out waiting for {what}\n{deployment.logs()}")


def _together(calls) -> list:
    """Run the calls at the same moment, one thread each; their answers in order."""
    answers, start = [None] * len(calls), threading.Barrier(len(calls))

    def run(i, call):
        start.wait()
        answers[i] = call()

    threads = [threading.Thread(target=run, args=(i, call)) for i, call in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert None not in answers, "a call did not answer within 60 s"
    return answers


def test_two_webs_two_workers_two_beats_on_one_database(tmp_path):
    make_workflow(slug="multi-sched", stages=["collect"], effect_stages=[], approval_stages=[], schedule="* * * * *")
    publish = make_workflow(slug="multi-exec", stages=["draft", "publish"], effect_stages=["publish"],
                            approval_stages=[], executors={"publish": {"handler": "record", "config": {}}})
    _, owner_token = make_operator("owner")
    agent_tokens = [make_agent(f"multi-agent-{n}")[1] for n in range(2)]
    # The schedule's last tick is two minutes old (a deployment restarting after a pause): the first beat
    # up sends the missed tick at once; the next minute's tick is sent by both.
    periodic_tasks_ensure()
    PeriodicTask.objects.filter(name="workflow: multi-sched").update(last_run_at=timezone.now() - timedelta(minutes=2))
    deployment = Deployment(tmp_path)
    for n in range(2):
        for role in ("web", "worker", "beat"):
            deployment.start(role, n)
    try:
        deployment.wait_serving()
        webs = [f"http://127.0.0.1:{port}/api/v1" for port in deployment.ports]
        agents = [httpx.Client(base_url=webs[n], headers={"Authorization": f"Token {t}"}, timeout=30)
                  for n, t in enumerate(agent_tokens)]
        owners = [httpx.Client(base_url=web, headers={"Authorization": f"Token {owner_token}"}, timeout=30)
                  for web in (webs[0], webs[1], webs[0])]

        # One run per trigger key, whichever instance each copy of the trigger reaches.
        for key in ("dup-1", "dup-2", "dup-3"):
            body = {"workflow": publish.slug, "intent": f"post/{key}", "trigger_key": key, "inputs": {"k": key}}
            answers = _together([lambda c=c: c.post("/runs/", json=body) for c in owners])
            assert sorted(a.status_code for a in answers) == [200, 200, 201], [a.text for a in answers]
            assert len({a.json()["id"] for a in answers}) == 1
            assert Run.objects.filter(workflow=publish, trigger_key=key).count() == 1

        # One lease holder per queued run: both agents ask both instances at once, three runs wait.
        leased, deadline = [], time.monotonic() + 30
        while len(leased) < 3:
            assert time.monotonic() < deadline, f"leased only {leased}\n{deployment.logs()}"
            answers = _together([lambda a=a: a.post("/runs/lease/", json={"workflows": [publish.slug]})
                                 for a in agents])
            got = [a.json()["id"] for a in answers if a.status_code == 200]
            assert all(a.status_code in (200, 204) for a in answers), [a.text for a in answers]
            assert len(got) == len(set(got)) and not set(got) & set(leased)
            leased += got
        assert LedgerEvent.objects.filter(run_id__in=leased, kind="leased").count() == 3

        # The executor performs the proposed publish once, on one of the two workers.
        run_id = leased[0]
        run = Run.objects.get(id=run_id)
        holder, lease_id = agents[int(run.lease_owner.rsplit("-", 1)[1])], str(run.lease_id)
        for kind in ("started", "succeeded"):
            r = holder.post(f"/runs/{run_id}/events/", json={"client_event_id": f"draft-{kind}", "stage": "draft",
                                                             "kind": kind, "lease_id": lease_id})
            assert r.status_code == 201, r.text
        r = holder.post(f"/runs/{run_id}/events/", json={"client_event_id": "publish-proposed", "stage": "publish",
                                                         "kind": "proposed", "action": ACTION, "lease_id": lease_id})
        assert r.status_code == 201, r.text
        _wait(lambda: Effect.objects.filter(run_id=run_id, stage="publish", status="verified").exists(),
              "the executor's publish", 45, deployment)
        performed = LedgerEvent.objects.filter(run_id=run_id, stage="publish", actor="system:executor",
                                               kind="succeeded")
        assert performed.count() == 1 and Effect.objects.filter(run_id=run_id, stage="publish").count() == 1

        # Both beats send each tick: one run per slot (the slot is the trigger key).
        sent = "Sending due task workflow: multi-sched"
        _wait(lambda: all(sent in p.read_text() for p in tmp_path.glob("beat-*.log")),
              "both beats to send a tick of multi-sched", 75, deployment)
        # Each copy of a tick a worker took answers the slot's run: two copies of one tick, one run.
        fired = re.compile(r"ledger\.tasks\.workflow_fire\[[^]]+\] succeeded in [\d.]+s: '([0-9a-f-]+)'")

        def answered() -> Counter:
            return Counter(m for p in tmp_path.glob("worker-*.log") for m in fired.findall(p.read_text()))
        _wait(lambda: max(answered().values(), default=0) >= 2, "two copies of one tick answered", 20, deployment)
        runs = Run.objects.filter(workflow__slug="multi-sched")
        assert set(answered()) == {str(r.id) for r in runs}, (answered(), list(runs))
        assert all(r.trigger_key.startswith("schedule:") and r.trigger == "schedule" for r in runs)

        # The sweeps of two beats ran on two workers without an error.
        logs = deployment.logs()
        assert "Traceback" not in logs and "ERROR/" not in logs, logs
        assert all(proc.poll() is None for _, proc in deployment.procs), logs
    finally:
        deployment.stop()
