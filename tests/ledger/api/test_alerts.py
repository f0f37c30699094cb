"""SPEC §14 over the API: on-call, owners and editors read alerts (open first, with history and deliveries);
on-call acknowledges and resolves; on-call or an owner silences a rule. Refusals write nothing."""

from datetime import timedelta

import pytest
from django.utils import timezone

from ledger import services
from ledger.models import Alert, AlertChange, AlertSilence, AuditEntry, Outbox
from tests.factories import client_for, make_agent, make_operator, make_workflow
from tests.ledger.helpers import AgentDriver

pytestmark = pytest.mark.django_db

RULE = {"name": "stuck", "kind": "escalation_age", "severity": "page", "notify": ["inapp", "webhook"], "minutes": 1}


@pytest.fixture
def firing():
    """A workflow whose escalated run has fired its rule: (workflow, alert)."""
    workflow = make_workflow(approval_stages=[], max_retries=1, alerts=[RULE])
    AgentDriver(client_for(make_agent()[1]), workflow.slug).escalated_run(stage="discovery")
    services.alerts_evaluate(timezone.now() + timedelta(minutes=2))
    return workflow, Alert.objects.get()


def _as(role):
    return client_for(make_operator(role)[1])


def test_readers_see_open_alerts_first_with_history_and_deliveries(firing):
    workflow, alert = firing
    now = timezone.now()
    old = Alert.objects.create(key=f"{workflow.slug}/stuck/old", workflow=workflow, rule="stuck", kind="escalation_age",
                               severity="page", state="resolved", subject="old", summary="gone",
                               opened_at=now + timedelta(hours=1), updated_at=now, resolved_at=now)
    for role in ("oncall", "owner", "editor"):
        body = _as(role).get("/api/v1/alerts/").json()
        assert [a["id"] for a in body["results"]] == [alert.id, old.id], role
    shown = _as("oncall").get(f"/api/v1/alerts/{alert.id}/").json()
    assert shown["key"] == alert.key and shown["state"] == "firing" and shown["runs"] == [str(alert.run_id)]
    assert [(h["state"], h["by"]) for h in shown["history"]] == [("firing", "system")]
    assert sorted((d["channel"], d["change"]) for d in shown["deliveries"]) == [("inapp", "firing"),
                                                                               ("webhook", "firing")]
    assert [a["id"] for a in _as("oncall").get("/api/v1/alerts/?state=resolved").json()["results"]] == [old.id]
    assert _as("oncall").get("/api/v1/alerts/?state=bogus").json()["code"] == "invalid_filter"


@pytest.mark.parametrize("role", ["viewer", "agent"])
def test_viewers_and_agents_do_not_read_alerts(firing, role):
    client = client_for(make_agent()[1]) if role == "agent" else _as(role)
    assert client.get("/api/v1/alerts/").status_code == 403


def test_oncall_acknowledges_then_resolves_and_a_resolved_alert_is_409(firing):
    _, alert = firing
    oncall = _as("oncall")
    body = oncall.post(f"/api/v1/alerts/{alert.id}/acknowledge/", {"note": "looking"}, format="json").json()
    assert body["state"] == "acknowledged" and body["history"][-1]["reason"] == "looking"
    assert body["history"][-1]["by"].startswith("user:")
    missing = oncall.post(f"/api/v1/alerts/{alert.id}/resolve/", {}, format="json")
    assert missing.status_code == 422 and AlertChange.objects.filter(alert=alert).count() == 2
    body = oncall.post(f"/api/v1/alerts/{alert.id}/resolve/", {"reason": "fixed by hand"}, format="json").json()
    assert body["state"] == "resolved" and [h["state"] for h in body["history"]] == ["firing", "acknowledged",
                                                                                     "resolved"]
    for verb in ("acknowledge", "resolve"):
        again = oncall.post(f"/api/v1/alerts/{alert.id}/{verb}/", {"reason": "again"}, format="json")
        assert again.status_code == 409 and again.json()["code"] == "alert_resolved"
    assert AlertChange.objects.filter(alert=alert).count() == 3
    assert Outbox.objects.filter(task="ledger.tasks.alert_send").count() == 6  # 3 changes × 2 channels


@pytest.mark.parametrize("role", ["owner", "editor", "viewer"])
def test_only_oncall_acknowledges_and_the_refusal_is_audited(firing, role):
    _, alert = firing
    response = _as(role).post(f"/api/v1/alerts/{alert.id}/acknowledge/", {}, format="json")
    assert response.status_code == 403 and response.json()["code"] == "permission_denied"
    assert AlertChange.objects.filter(alert=alert).count() == 1
    assert AuditEntry.objects.filter(action="alert_acknowledge", outcome="refused").count() == 1


def test_an_owner_silences_a_rule_and_ending_it_delivers_the_open_alert_once(firing):
    workflow, alert = firing
    url = f"/api/v1/workflows/{workflow.slug}/alerts/stuck/silence/"
    owner = _as("owner")
    assert _as("editor").post(url, {"minutes": 30, "reason": "deploy"}, format="json").status_code == 403
    assert owner.post(url, {"minutes": 0, "reason": "deploy"}, format="json").status_code == 422
    body = owner.post(url, {"minutes": 30, "reason": "deploy"}, format="json").json()
    assert (body["rule"], body["reason"]) == ("stuck", "deploy")
    before = Outbox.objects.count()
    oncall = _as("oncall")
    oncall.post(f"/api/v1/alerts/{alert.id}/acknowledge/", {}, format="json")
    assert Outbox.objects.count() == before  # recorded, not delivered
    assert oncall.delete(url).status_code == 204
    assert Outbox.objects.count() == before + 2  # the open alert, once per channel
    assert oncall.delete(url).json()["code"] == "silence_not_found"
    assert owner.post(f"/api/v1/workflows/{workflow.slug}/alerts/nope/silence/", {"minutes": 5, "reason": "r"},
                      format="json").json()["code"] == "alert_rule_not_found"
    assert AlertSilence.objects.get().until <= timezone.now()
