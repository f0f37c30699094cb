"""SPEC §14: alert rules live in the workflow definition, validated; alerts are kept by the database."""

from datetime import timedelta

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.utils import DatabaseError
from django.utils import timezone

from ledger import services
from ledger.models import Alert, AlertChange, Workflow
from ledger.services.apply import file_form, file_parse
from tests.factories import client_for, make_operator, make_workflow

pytestmark = pytest.mark.django_db

RULES = [
    {"name": "nightly", "kind": "absence", "severity": "page", "notify": ["inapp", "pagerduty"],
     "cron": "0 2 * * *", "within_minutes": 60, "stage": "deploy"},
    {"name": "flaky", "kind": "failure_rate", "severity": "ticket", "notify": ["chat"], "window_minutes": 60,
     "threshold": 0.5, "min_runs": 4},
    {"name": "stuck", "kind": "escalation_age", "severity": "page", "notify": ["webhook"], "minutes": 30},
    {"name": "waiting", "kind": "approval_age", "severity": "info", "notify": ["email"], "minutes": 120},
    {"name": "backlog", "kind": "queue_age", "severity": "ticket", "notify": ["inapp"], "minutes": 5,
     "attributes": {"team": "infra"}},
]


def _post(body):
    _, token = make_operator("owner")
    return client_for(token).post("/api/v1/workflows/", body, format="json")


def test_a_workflow_carries_its_alert_rules():
    response = _post({"slug": "with-alerts", "alerts": RULES})
    assert response.status_code == 201, response.content
    assert response.json()["alerts"] == RULES
    assert Workflow.objects.get(slug="with-alerts").alerts == RULES


@pytest.mark.parametrize("rule, name, field", [
    ({**RULES[0], "name": "Bad Name"}, "#0", "name"),
    ({**RULES[0], "kind": "rumour"}, "nightly", "kind"),
    ({**RULES[0], "severity": "urgent"}, "nightly", "severity"),
    ({**RULES[0], "notify": ["sms"]}, "nightly", "notify"),
    ({**RULES[0], "notify": []}, "nightly", "notify"),
    ({**RULES[0], "cron": "0 2 * *"}, "nightly", "cron"),
    ({**RULES[0], "stage": "nowhere"}, "nightly", "stage"),
    ({k: v for k, v in RULES[0].items() if k != "within_minutes"}, "nightly", "within_minutes"),
    ({**RULES[1], "threshold": 1.5}, "flaky", "threshold"),
    ({**RULES[1], "threshold": True}, "flaky", "threshold"),
    ({**RULES[1], "min_runs": 0}, "flaky", "min_runs"),
    ({**RULES[2], "minutes": "30"}, "stuck", "minutes"),
    ({**RULES[2], "cron": "* * * * *"}, "stuck", "cron"),
    ({**RULES[4], "attributes": ["team"]}, "backlog", "attributes"),
    ({**RULES[4], "attributes": {"Team": "infra"}}, "backlog", "attributes"),  # SPEC §15's keys and values
    ({**RULES[4], "attributes": {"ratio": 0.5}}, "backlog", "attributes"),
    ({**RULES[4], "attributes": {f"k{i}": i for i in range(17)}}, "backlog", "attributes"),
    ({**RULES[4], "minutes": 10}, "backlog", "minutes"),  # 600 s reach lease_seconds: never fires
])
def test_an_invalid_rule_is_refused_naming_the_rule_and_field(rule, name, field):
    response = _post({"slug": "refused", "alerts": [rule]})
    assert response.status_code == 422, response.content
    body = response.json()
    assert (body["code"], body["rule"], body["field"]) == ("invalid_alert", name, field)
    assert not Workflow.objects.filter(slug="refused").exists()


def test_two_rules_of_one_name_are_refused():
    body = _post({"slug": "twice", "alerts": [RULES[2], {**RULES[3], "name": "stuck"}]}).json()
    assert (body["code"], body["rule"], body["field"]) == ("invalid_alert", "stuck", "name")


def test_a_queue_age_rule_fits_a_longer_lease():
    assert _post({"slug": "long-lease", "lease_seconds": 3600, "alerts": [{**RULES[4], "minutes": 30}]}).status_code == 201


def test_rules_change_without_a_policy_bump():
    workflow = make_workflow()
    _, token = make_operator("owner")
    response = client_for(token).patch(f"/api/v1/workflows/{workflow.slug}/", {"alerts": RULES[:2]}, format="json")
    assert response.status_code == 200, response.content
    workflow.refresh_from_db()
    assert workflow.alerts == RULES[:2] and workflow.policy_version == "1"


def test_apply_and_export_workflows_carry_the_rules():
    owner, _ = make_operator("owner")
    services.workflows_apply(definitions=[{"slug": "as-code", "alerts": RULES}], user=owner)
    assert Workflow.objects.get(slug="as-code").alerts == RULES
    text = file_form(Workflow.objects.filter(slug="as-code"))
    definitions = file_parse(text.encode(), json_format=False)
    assert definitions[0]["alerts"] == RULES
    again = services.workflows_apply(definitions=definitions, user=owner)
    assert [o.result for o in again] == ["unchanged"]


def _alert(workflow, state="firing", key="k/r/s"):
    now = timezone.now()
    return Alert.objects.create(key=key, workflow=workflow, rule="r", kind="queue_age", severity="page", state=state,
                                subject="s", summary="x", opened_at=now, updated_at=now)


def test_the_database_keeps_one_open_alert_per_key():
    workflow = make_workflow()
    _alert(workflow)
    with pytest.raises(IntegrityError), transaction.atomic():
        _alert(workflow, state="acknowledged")
    _alert(workflow, state="resolved")
    _alert(workflow, state="resolved")
    assert Alert.objects.filter(key="k/r/s").count() == 3


@pytest.mark.postgres
@pytest.mark.parametrize("sql", ["UPDATE ledger_alertchange SET by = 'mallory'", "DELETE FROM ledger_alertchange"])
def test_an_alerts_history_is_append_only(sql):
    alert = _alert(make_workflow())
    AlertChange.objects.create(alert=alert, state="firing", by="system", at=timezone.now(), reason="fired")
    with pytest.raises(DatabaseError, match="pgtrigger"), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql)
    with pytest.raises(DatabaseError), transaction.atomic():
        AlertChange.objects.filter(alert=alert).update(reason="rewritten", at=timezone.now() - timedelta(days=1))
    assert AlertChange.objects.get(alert=alert).by == "system"


def test_export_ledger_carries_the_rules(monkeypatch):
    import io
    import json

    from django.core.management import call_command

    monkeypatch.setenv("STATEBOARD_EXPORT_KEY", "k")
    make_workflow(slug="exported", alerts=RULES)
    out = io.StringIO()
    call_command("export_ledger", stdout=out, stderr=io.StringIO())
    [line] = [json.loads(t) for t in out.getvalue().splitlines() if '"exported"' in t and '"workflow"' in t]
    assert line["alerts"] == RULES
