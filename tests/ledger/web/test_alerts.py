"""SPEC §14 on the pages: /alerts/ lists open alerts first with the one action that resolves each, then resolved
ones, in a constant number of queries; /metrics carries stateboard_alerts_open{workflow,rule,severity}."""

import uuid

import pytest
from django.urls import reverse
from django.utils import timezone

from ledger.models import Alert
from tests.factories import HX, assert_queries_flat, login, make_workflow, page_queries, texts

pytestmark = pytest.mark.django_db

URL = "/alerts/"


def _alert(workflow, subject, *, kind="escalation_age", state="firing", severity="page", **fields):
    now = timezone.now()
    return Alert.objects.create(key=f"{workflow.slug}/r/{subject}", workflow=workflow, rule="r", kind=kind,
                                severity=severity, state=state, subject=subject, summary=f"summary {subject}",
                                opened_at=now, updated_at=now, **fields)


def test_the_page_lists_open_alerts_first_with_the_action_that_resolves_each():
    workflow = make_workflow()
    run_id, approval_id = uuid.uuid4(), uuid.uuid4()
    _alert(workflow, "old", state="resolved", run_id=run_id)
    _alert(workflow, "stuck", run_id=run_id)
    _alert(workflow, "waiting", kind="approval_age", severity="info", run_id=run_id, approval_id=approval_id)
    client, _ = login("oncall")
    html = texts(client.get(URL))
    assert html.index("summary stuck") < html.index("Resolved") < html.index("summary old")
    assert f'href="{reverse("ledger:run_detail", args=[run_id])}">Retry the run' in html
    assert f'href="{reverse("ledger:approval_list")}#approval-{approval_id}">Decide the approval' in html
    fragment = texts(client.get(URL, **HX))
    assert 'id="alert-tables"' in fragment and "<html" not in fragment


@pytest.mark.parametrize("role, status", [("owner", 200), ("editor", 200), ("viewer", 403)])
def test_the_page_is_for_oncall_owners_and_editors(role, status):
    client, _ = login(role)
    assert client.get(URL).status_code == status


def test_the_page_reads_in_a_constant_number_of_queries():
    workflows = [make_workflow() for _ in range(6)]
    client, _ = login("oncall")
    page_queries(client, URL)  # (the session's first read)
    assert_queries_flat(client, URL, lambda n: (_alert(workflows[n], f"s{n}", run_id=uuid.uuid4()),
                                                _alert(workflows[n], f"a{n}", kind="absence"),  # links its workflow
                                                _alert(workflows[n], f"r{n}", state="resolved")), rows=6)


def test_metrics_count_open_alerts_by_workflow_rule_and_severity():
    workflow = make_workflow(slug="metered")
    _alert(workflow, "a")
    _alert(workflow, "b", state="acknowledged")
    _alert(workflow, "c", state="resolved")
    text = texts(login("viewer")[0].get("/metrics"))
    assert 'stateboard_alerts_open{workflow="metered",rule="r",severity="page"} 2' in text


def test_oncall_acknowledges_then_resolves_from_the_page_and_each_change_is_recorded():
    from ledger.models import AlertChange

    alert = _alert(make_workflow(), "stuck", run_id=uuid.uuid4())
    client, user = login("oncall")
    html = texts(client.get(URL))
    assert 'data-action="acknowledge"' in html and 'data-action="resolve"' in html
    fragment = texts(client.post(f"/alerts/{alert.id}/acknowledge/", {"reason": "looking"}, **HX))
    assert "Acknowledged" in fragment and 'data-state="acknowledged"' in fragment
    assert 'data-action="acknowledge"' not in fragment  # acknowledged: only resolve is left
    refused = client.post(f"/alerts/{alert.id}/resolve/", {"reason": "  "}, **HX)
    assert refused.status_code == 422
    assert Alert.objects.get(id=alert.id).state == "acknowledged"
    done = client.post(f"/alerts/{alert.id}/resolve/", {"reason": "fixed the runner"})
    assert done.status_code == 302 and done["Location"] == URL
    assert Alert.objects.get(id=alert.id).state == "resolved"
    changes = [(c.state, c.by, c.reason) for c in AlertChange.objects.filter(alert=alert).order_by("id")]
    assert changes == [("acknowledged", f"user:{user.username}", "looking"),
                       ("resolved", f"user:{user.username}", "fixed the runner")]


def test_editors_see_the_alerts_without_the_oncall_buttons():
    _alert(make_workflow(), "stuck", run_id=uuid.uuid4())
    html = texts(login("editor")[0].get(URL))
    assert "summary stuck" in html and 'data-action="acknowledge"' not in html and 'data-action="resolve"' not in html
