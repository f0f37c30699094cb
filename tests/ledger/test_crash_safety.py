"""Crash safety with real worker processes: a killed worker, late and double ticks, a broker outage."""

import time
from datetime import datetime
from datetime import timezone as dt_timezone

import pytest

from ledger import services
from ledger.models import Approval, Effect, LedgerEvent, Outbox, Run
from tests.factories import client_for, make_agent, make_operator, make_workflow
from tests.ledger.helpers import AgentDriver
from tests.ledger.receiver import Receiver
from tests.ledger.workers import BROKER, wait_until, workers  # noqa: F401 (fixture)

ACTION = {"system": "k8s", "operation": "deploy", "target": "prod/web", "summary": "roll out v2"}
pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]  # real worker processes


def test_crash_worker_killed_mid_call_verifies_and_never_posts_again(workers):  # noqa: F811
    """SIGKILL the worker while the receiver is answering: after restart the executor verifies, never re-POSTs."""
    with Receiver() as receiver:
        receiver.block = True
        wf = make_workflow(stages=["build", "deploy"], effect_stages=["deploy"], approval_stages=[],
                           executors={"deploy": {"handler": "webhook",
                                                 "config": {"url": receiver.url, "timeout_seconds": 2}}})
        driver = AgentDriver(client_for(make_agent()[1]), wf.slug)
        run = driver.trigger()
        driver.pass_stage(run["id"], "build")
        first = workers.start()
        driver.event(run["id"], "deploy", "proposed", action=ACTION)
        assert receiver.post_arrived.wait(30), "the executor never called the receiver"
        workers.kill(first)
        receiver.block = False
        receiver.release.set()
        assert Run.objects.get(id=run["id"]).state == "execute"  # the claim was committed before the call
        time.sleep(2.2)  # past the attempt's deadline (the handler's timeout)
        assert services.executor_sweep() == 1
        workers.start()
        assert wait_until(lambda: Run.objects.get(id=run["id"]).state == "completed", 40)
        key = Effect.objects.get(run_id=run["id"]).idempotency_key
        assert receiver.posts[key] == 1 and receiver.gets[key] >= 1
    lost = LedgerEvent.objects.get(run_id=run["id"], kind="unknown")
    assert lost.reason_code == "attempt_deadline_passed" and lost.actor == "system:executor"
    assert Effect.objects.get(run_id=run["id"]).status == "verified"



def test_crash_worker_killed_mid_compensation_verifies_the_undo_and_never_sends_it_again(workers):  # noqa: F811
    """An approved compensation on an executor stage: SIGKILL the worker while the receiver holds the undo's
    POST; after the deadline the sweep re-enqueues it, the new worker verifies it and posts `compensated`."""
    with Receiver() as receiver:
        wf = make_workflow(stages=["build", "deploy"], effect_stages=["deploy"], approval_stages=[],
                           executors={"deploy": {"handler": "webhook",
                                                 "config": {"url": receiver.url, "timeout_seconds": 2}}})
        driver = AgentDriver(client_for(make_agent()[1]), wf.slug)
        run_id = driver.trigger()["id"]
        driver.pass_stage(run_id, "build")
        first = workers.start()
        driver.event(run_id, "deploy", "proposed", action=ACTION)
        assert wait_until(lambda: Run.objects.get(id=run_id).state == "completed", 40)
        oncall, editor = client_for(make_operator("oncall")[1]), client_for(make_operator("editor")[1])
        answer = oncall.post(f"/api/v1/runs/{run_id}/rollback/",
                             {"to_stage": "deploy", "reason": "bad rollout", "compensate": True}, format="json")
        assert answer.status_code == 200 and answer.json()["state"] == "compensate"
        approval = Approval.objects.get(run_id=run_id, kind="compensation")
        receiver.block = True
        receiver.post_arrived.clear()
        assert editor.post(f"/api/v1/approvals/{approval.id}/approve/", {}, format="json").status_code == 200
        assert receiver.post_arrived.wait(30), "the executor never sent the undo"
        workers.kill(first)
        receiver.block = False
        receiver.release.set()
        held = Run.objects.get(id=run_id)
        assert held.state == "compensate" and held.executor_state["current"]["done"] is False  # committed first
        time.sleep(2.2)  # past the attempt's deadline (the handler's timeout)
        assert services.executor_sweep() == 1
        workers.start()
        assert wait_until(lambda: Run.objects.get(id=run_id).state == "resume", 40)
        key = f"compensation:{approval.id}"
        assert receiver.posts[key] == 1 and receiver.gets[key] >= 1
    compensated = LedgerEvent.objects.get(run_id=run_id, kind="compensated")
    assert compensated.actor == "system:executor" and compensated.data["approval"] == str(approval.id)
    assert Effect.objects.get(run_id=run_id).status == "compensated"

def test_crash_late_and_double_ticks_make_one_run_per_tick(workers):  # noqa: F811
    """Ticks sent while no worker runs (and each sent by two schedulers) become one run per tick, labelled T."""
    from django_celery_beat.models import PeriodicTask
    from django_celery_beat.schedulers import ModelEntry

    from ledger.schedules import periodic_tasks_ensure
    from ledger.schedules.beat import TickScheduler
    from stateboard.celery import app

    wf = make_workflow(schedule="*/5 * * * *", schedule_intent="nightly", schedule_inputs={"window": "5m"})
    periodic_tasks_ensure()
    task = PeriodicTask.objects.get(name=f"workflow: {wf.slug}")
    schedulers = [TickScheduler(app=app, lazy=True) for _ in range(2)]
    fake_nows = [datetime(2026, 3, 1, 10, 5, 2, tzinfo=dt_timezone.utc), datetime(2026, 3, 1, 10, 10, 1,
                                                                                   tzinfo=dt_timezone.utc)]
    original_now = app.now
    try:
        for now in fake_nows:  # the worker is down across both ticks
            for offset, scheduler in enumerate(schedulers):  # two schedulers, a few seconds apart
                app.now = lambda now=now, offset=offset: now.replace(second=now.second + 3 * offset)
                scheduler.apply_async(ModelEntry(task, app=app), advance=False)
    finally:
        app.now = original_now
    assert not Run.objects.filter(workflow=wf).exists()
    workers.start()
    assert wait_until(lambda: Run.objects.filter(workflow=wf).count() == 2 and not _pending(workers.queue), 40)
    time.sleep(1)  # any duplicate still in flight would land now
    runs = {r.trigger_key: r for r in Run.objects.filter(workflow=wf)}
    assert set(runs) == {"schedule:2026-03-01T10:05:00Z", "schedule:2026-03-01T10:10:00Z"}
    for key, run in runs.items():
        assert run.inputs == {"window": "5m", "slot": key.split(":", 1)[1]} and run.intent == "nightly"
        assert run.trigger == "schedule"
    first = runs["schedule:2026-03-01T10:05:00Z"]
    assert first.state == "fresh" and first.queued_until is not None


def _pending(queue) -> int:
    import redis

    return redis.Redis.from_url(BROKER).llen(queue)


def _point_broker(monkeypatch, url):
    from kombu import pools

    from stateboard.celery import app

    pools.reset()  # kombu keeps connection and producer pools per broker URL, process-wide
    monkeypatch.setitem(app.conf, "broker_url", url)
    app._pool = None
    app.amqp._producer_pool = None


def test_crash_broker_down_keeps_the_job_in_the_outbox(workers, monkeypatch):  # noqa: F811
    """Broker at a closed port: triggers and events are accepted, the executor job waits in the outbox,
    /healthz is 503; once the broker answers the relay sends it and the stage is performed."""
    wf = make_workflow(stages=["build", "deploy"], effect_stages=["deploy"], approval_stages=[],
                       executors={"deploy": {"handler": "record", "config": {}}})
    driver = AgentDriver(client_for(make_agent()[1]), wf.slug)
    _point_broker(monkeypatch, "redis://127.0.0.1:6390/0")  # nothing listens there
    try:
        run = driver.trigger()
        driver.pass_stage(run["id"], "build")
        driver.event(run["id"], "deploy", "proposed", action=ACTION)
        row = Outbox.objects.get()
        assert row.sent_at is None and row.args == [run["id"], "deploy"] and row.last_error
        assert driver.client.get("/healthz").status_code == 503
        assert services.outbox_relay() == 0
    finally:
        _point_broker(monkeypatch, BROKER)
    workers.start()
    assert services.outbox_relay() == 1
    assert wait_until(lambda: Run.objects.get(id=run["id"]).state == "completed", 40)
    assert Outbox.objects.get().sent_at is not None
