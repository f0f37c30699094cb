"""SPEC §14 with §15: a rule's ``attributes`` select the runs it looks at, each key equal as ``attr.<key>=``
would select them (on both stores)."""

from datetime import timedelta

import pytest
from django.utils import timezone

from ledger import services
from ledger.models import Alert, Run, Workflow
from tests.factories import client_for, make_agent, make_operator, make_workflow
from tests.ledger.helpers import AgentDriver

pytestmark = pytest.mark.django_db


def _rule(name, kind, **parameters):
    return {"name": name, "kind": kind, "severity": "page", "notify": ["inapp"], **parameters}


def _later(minutes):
    return timezone.now() + timedelta(minutes=minutes)


def test_an_escalation_rule_looks_only_at_the_runs_its_attributes_select():
    workflow = make_workflow(approval_stages=[], max_retries=1,
                             alerts=[_rule("infra", "escalation_age", minutes=30, attributes={"team": "infra", "tier": 2})])
    driver = AgentDriver(client_for(make_agent()[1]), workflow.slug)
    infra = driver.escalated_run(stage="discovery", intent="a", attributes={"team": "infra", "tier": "2"})
    web = driver.escalated_run(stage="discovery", intent="b", attributes={"team": "web", "tier": 2})
    assert services.alerts_evaluate(_later(31))["opened"] == 1
    assert str(Alert.objects.get().run_id) == infra["id"]  # tier "2" matches 2, as attr.tier=2 would
    Run.objects.filter(id=web["id"]).update(attributes={"team": "infra", "tier": 2})
    assert services.alerts_evaluate(_later(32))["opened"] == 1


def test_a_failure_rate_counts_only_the_selected_runs():
    rule = _rule("flaky", "failure_rate", window_minutes=60, threshold=0.5, min_runs=2, attributes={"hot": True})
    workflow = make_workflow(approval_stages=[], alerts=[rule])
    driver = AgentDriver(client_for(make_agent()[1]), workflow.slug)
    for n in range(3):  # failures of runs the rule does not look at
        driver.fail_stage(driver.trigger(inputs={"v": n}, intent=f"cold{n}", attributes={"hot": False})["id"],
                          "discovery")
    assert services.alerts_evaluate(_later(1))["opened"] == 0
    for n in range(2):
        driver.fail_stage(driver.trigger(inputs={"v": n}, intent=f"hot{n}", attributes={"hot": True})["id"],
                          "discovery")
    assert services.alerts_evaluate(_later(1))["opened"] == 1
    assert "2 of 2 runs" in Alert.objects.get().summary


def test_a_queue_age_and_an_absence_rule_select_by_attributes():
    workflow = make_workflow(approval_stages=[], alerts=[
        _rule("backlog", "queue_age", minutes=5, attributes={"team": "infra"}),
        _rule("hourly", "absence", cron="0 * * * *", within_minutes=1, attributes={"team": "infra"})])
    Workflow.objects.filter(id=workflow.id).update(created_at=timezone.now() - timedelta(days=1))
    editor = client_for(make_operator("editor")[1])
    assert editor.post("/api/v1/runs/", {"workflow": workflow.slug, "intent": "q", "inputs": {},
                                         "attributes": {"team": "web"}}, format="json").status_code == 201
    now = timezone.now()
    services.alerts_evaluate(now)
    assert set(Alert.objects.values_list("rule", flat=True)) == {"hourly"}  # the web run is not infra's backlog
    driver = AgentDriver(client_for(make_agent()[1]), workflow.slug)
    web = driver.trigger(intent="web-done", attributes={"team": "web"})
    for stage in workflow.stages:
        driver.pass_stage(web["id"], stage, effect_stage=stage in workflow.effect_stages)
    services.alerts_evaluate(now)
    assert Alert.objects.get(rule="hourly").state == "firing"  # a web run completing is not infra's
    infra = driver.trigger(intent="infra-done", attributes={"team": "infra"})
    for stage in workflow.stages:
        driver.pass_stage(infra["id"], stage, effect_stage=stage in workflow.effect_stages)
    services.alerts_evaluate(now)
    assert Alert.objects.get(rule="hourly").state == "resolved"


def test_an_approval_age_rule_selects_by_its_runs_attributes():
    workflow = make_workflow(stages=["build", "deploy"], effect_stages=["deploy"], approval_stages=["deploy"],
                             alerts=[_rule("waiting", "approval_age", minutes=60, attributes={"team": "infra"})])
    driver = AgentDriver(client_for(make_agent()[1]), workflow.slug)
    action = {"system": "k8s", "operation": "deploy", "target": "prod", "summary": "ship"}
    for intent, team in (("web", "web"), ("infra", "infra")):
        run = driver.trigger(intent=intent, attributes={"team": team})
        driver.pass_stage(run["id"], "build")
        assert driver.client.post(f"/api/v1/runs/{run['id']}/approvals/", {
            "kind": "high_impact", "stage": "deploy", "action": action}, format="json").status_code == 201
    services.alerts_evaluate(_later(61))
    assert Run.objects.get(id=Alert.objects.get().run_id).intent == "infra"
