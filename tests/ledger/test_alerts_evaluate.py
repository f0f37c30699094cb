"""SPEC §14: the evaluator opens one alert per subject, resolves it when the condition is gone, records each
change once (by ``system``), and stays idempotent across beats. Times are passed in, never waited for."""

from datetime import timedelta

import pytest
from django.utils import timezone

from ledger import services
from ledger.models import Alert, AlertChange, Outbox, Workflow
from django_celery_beat.models import PeriodicTask

from ledger import tasks
from ledger.schedules import SWEEPS, periodic_tasks_ensure
from tests.factories import client_for, make_agent, make_operator, make_workflow
from tests.ledger.helpers import AgentDriver, race, raised

pytestmark = pytest.mark.django_db


def _rule(name, kind, **parameters):
    return {"name": name, "kind": kind, "severity": "page", "notify": ["inapp"], **parameters}


def _crew(*rules, **fields):
    workflow = make_workflow(approval_stages=[], alerts=list(rules), **fields)
    return workflow, AgentDriver(client_for(make_agent()[1]), workflow.slug)


def _history(alert):
    return [(c.state, c.by) for c in AlertChange.objects.filter(alert=alert).order_by("id")]


def _later(minutes):
    return timezone.now() + timedelta(minutes=minutes)


def test_beat_evaluates_alerts_every_minute():
    assert SWEEPS["stateboard: evaluate alerts"] == ("ledger.tasks.alerts_evaluate", 60)
    periodic_tasks_ensure()
    entry = PeriodicTask.objects.get(name="stateboard: evaluate alerts")
    assert (entry.task, entry.interval.every) == ("ledger.tasks.alerts_evaluate", 60)
    assert tasks.alerts_evaluate() == {"opened": 0, "resolved": 0, "released": 0}


def test_an_escalation_waiting_too_long_fires_once_and_resolves_when_it_leaves_escalated():
    workflow, driver = _crew(_rule("stuck", "escalation_age", minutes=30), max_retries=1)
    run = driver.escalated_run(stage="discovery")
    assert services.alerts_evaluate(_later(5))["opened"] == 0
    assert services.alerts_evaluate(_later(31))["opened"] == 1
    assert services.alerts_evaluate(_later(32))["opened"] == 0  # one open alert per key
    alert = Alert.objects.get()
    assert (alert.key, alert.state, str(alert.run_id)) == (f"{workflow.slug}/stuck/{run['id']}", "firing", run["id"])
    oncall, _ = make_operator("oncall")
    services.run_abandon(run_id=run["id"], user=oncall, reason="gave up")
    assert services.alerts_evaluate(_later(33))["resolved"] == 1
    alert.refresh_from_db()
    assert alert.state == "resolved" and _history(alert) == [("firing", "system"), ("resolved", "system")]


def test_a_failure_rate_over_the_threshold_fires_and_falls_out_of_the_window():
    workflow, driver = _crew(_rule("flaky", "failure_rate", window_minutes=60, threshold=0.5, min_runs=3))
    for n in range(2):
        driver.fail_stage(driver.trigger(inputs={"v": n}, intent=f"i{n}")["id"], "discovery")
    assert services.alerts_evaluate(_later(1))["opened"] == 0  # two ended: under min_runs
    ok = driver.trigger(inputs={"v": 9}, intent="ok")
    for stage in workflow.stages:
        driver.pass_stage(ok["id"], stage, effect_stage=stage in workflow.effect_stages)
    assert services.alerts_evaluate(_later(1))["opened"] == 1  # 2 of 3 ≥ 50 %
    assert Alert.objects.get().key == f"{workflow.slug}/flaky/rate"
    assert services.alerts_evaluate(_later(90))["resolved"] == 1


def test_an_approval_pending_too_long_fires_and_resolves_once_decided():
    workflow = make_workflow(stages=["build", "deploy"], effect_stages=["deploy"], approval_stages=["deploy"],
                             alerts=[_rule("waiting", "approval_age", minutes=60)])
    driver = AgentDriver(client_for(make_agent()[1]), workflow.slug)
    run = driver.trigger()
    driver.pass_stage(run["id"], "build")
    approval = driver.client.post(f"/api/v1/runs/{run['id']}/approvals/", {
        "kind": "high_impact", "stage": "deploy", "action": {"system": "k8s", "operation": "deploy",
                                                              "target": "prod", "summary": "ship"}}, format="json").json()
    services.alerts_evaluate(_later(61))
    alert = Alert.objects.get()
    assert (alert.subject, str(alert.approval_id)) == (approval["id"], approval["id"])
    _, editor_token = make_operator("editor")
    assert client_for(editor_token).post(f"/api/v1/approvals/{approval['id']}/approve/").status_code == 200
    services.alerts_evaluate(_later(62))
    alert.refresh_from_db()
    assert alert.state == "resolved"


def test_a_run_queued_with_no_agent_fires_one_alert_for_the_workflow():
    workflow, _ = _crew(_rule("backlog", "queue_age", minutes=5))
    _, token = make_operator("editor")
    for n in range(2):
        assert client_for(token).post("/api/v1/runs/", {"workflow": workflow.slug, "intent": f"q{n}",
                                                        "inputs": {"v": n}}, format="json").status_code == 201
    services.alerts_evaluate(_later(6))
    assert list(Alert.objects.values_list("subject", "state")) == [("queue", "firing")]
    assert "2 run(s)" in Alert.objects.get().summary


def test_an_absent_run_fires_at_the_tick_and_resolves_when_it_completes_late():
    workflow, driver = _crew(_rule("hourly", "absence", cron="0 * * * *", within_minutes=1))
    Workflow.objects.filter(id=workflow.id).update(created_at=timezone.now() - timedelta(days=1))
    now = timezone.now()
    services.alerts_evaluate(now)
    alert = Alert.objects.get()
    tick = (now - timedelta(minutes=1)).replace(minute=0, second=0, microsecond=0)
    assert alert.subject == tick.strftime("%Y-%m-%dT%H:%MZ")
    run = driver.trigger()
    for stage in workflow.stages:
        driver.pass_stage(run["id"], stage, effect_stage=stage in workflow.effect_stages)
    services.alerts_evaluate(now)
    alert.refresh_from_db()
    assert alert.state == "resolved"


def test_a_rule_removed_resolves_its_alerts():
    workflow, driver = _crew(_rule("stuck", "escalation_age", minutes=1), max_retries=1)
    driver.escalated_run(stage="discovery")
    services.alerts_evaluate(_later(2))
    Workflow.objects.filter(id=workflow.id).update(alerts=[])
    assert services.alerts_evaluate(_later(3))["resolved"] == 1
    assert AlertChange.objects.filter(state="resolved", by="system", reason="The rule was removed.").count() == 1


def test_a_silenced_rule_records_but_does_not_deliver_until_the_silence_ends():
    workflow, driver = _crew(_rule("stuck", "escalation_age", minutes=1), max_retries=1)
    driver.escalated_run(stage="discovery")
    now = timezone.now()
    services.silence_set(workflow=workflow, rule="stuck", minutes=30, reason="maintenance",
                         user=make_operator("oncall")[0], now=now)
    services.alerts_evaluate(now + timedelta(minutes=2))
    assert Alert.objects.count() == 1 and not Outbox.objects.filter(task="ledger.tasks.alert_send").exists()
    assert services.alerts_evaluate(now + timedelta(minutes=31))["released"] == 1
    assert services.alerts_evaluate(now + timedelta(minutes=32))["released"] == 0
    assert Outbox.objects.filter(task="ledger.tasks.alert_send").count() == 1


@pytest.mark.django_db(transaction=True)
def test_beats_evaluating_at_once_open_one_alert_and_record_it_once():
    workflow, driver = _crew(_rule("stuck", "escalation_age", minutes=1), max_retries=1)
    driver.escalated_run(stage="discovery")
    at = _later(5)
    results = race(4, lambda i: services.alerts_evaluate(at))
    assert not raised(results), raised(results)
    assert sum(r["opened"] for r in results) == 1
    assert Alert.objects.count() == 1 and AlertChange.objects.count() == 1
    assert Outbox.objects.filter(task="ledger.tasks.alert_send").count() == 1
