"""Workflow definitions: owners write, everyone reads, policy bumps are audited and void old work."""

import pytest

from ledger.models import AuditEntry, Workflow
from tests.factories import client_for, make_agent, make_operator, make_workflow
from tests.ledger.helpers import AgentDriver

pytestmark = pytest.mark.django_db


def test_owner_creates_a_workflow_with_defaults():
    _, token = make_operator("owner")
    response = client_for(token).post("/api/v1/workflows/", {"slug": "daily", "title": "Daily"}, format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["stages"][0] == "discovery" and body["effect_stages"] == ["commit", "push", "deploy"]
    assert (body["max_retries"], body["lease_seconds"], body["checkpoint_ttl_seconds"]) == (3, 600, 86400)
    again = client_for(token).post("/api/v1/workflows/", {"slug": "daily"}, format="json")
    assert again.status_code == 409 and again.json()["code"] == "workflow_exists"


@pytest.mark.parametrize("body, code", [
    ({"slug": "x", "stages": ["a", "a"]}, "validation_error"),
    ({"slug": "x", "stages": ["a", "b"], "effect_stages": ["c"]}, "validation_error"),
    ({"slug": "x", "schedule": "every day"}, "invalid_schedule"),
    ({"slug": "bad slug!"}, "validation_error"),
])
def test_invalid_workflows_are_refused(body, code):
    _, token = make_operator("owner")
    response = client_for(token).post("/api/v1/workflows/", body, format="json")
    assert response.status_code == 422 and response.json()["code"] == code
    assert not Workflow.objects.filter(slug="x").exists()


def test_policy_bump_is_audited_and_makes_the_next_run_fresh():
    wf = make_workflow(approval_stages=[])
    _, owner_token = make_operator("owner")
    _, agent_token = make_agent()
    driver = AgentDriver(client_for(agent_token), wf.slug)
    run = driver.trigger(intent="p")
    driver.pass_stage(run["id"], "discovery")
    driver.event(run["id"], "assessment", "started")
    driver.event(run["id"], "assessment", "failed")
    response = client_for(owner_token).patch(f"/api/v1/workflows/{wf.slug}/",
                                             {"policy_version": "2", "reason": "new review rules"}, format="json")
    assert response.status_code == 200 and response.json()["policy_version"] == "2"
    entry = AuditEntry.objects.get(action="policy_bump")
    assert entry.data == {"from": "1", "to": "2"} and entry.reason == "new review rules"
    nxt = driver.trigger(intent="p")
    assert (nxt["decision"]["outcome"], nxt["decision"]["reason_code"]) == ("fresh", "policy_changed")
    assert nxt["input_fingerprint"] != run["input_fingerprint"]


def test_agents_and_editors_cannot_change_workflows():
    wf = make_workflow()
    for token in (make_agent()[1], make_operator("editor")[1]):
        response = client_for(token).patch(f"/api/v1/workflows/{wf.slug}/", {"policy_version": "9"}, format="json")
        assert response.status_code == 403
    assert Workflow.objects.get(id=wf.id).policy_version == "1"


def test_fingerprint_ignores_key_order():
    from ledger.services import input_fingerprint

    a = input_fingerprint(workflow_slug="w", intent="i", inputs={"a": 1, "b": {"c": 2, "d": 3}}, policy_version="1")
    b = input_fingerprint(workflow_slug="w", intent="i", inputs={"b": {"d": 3, "c": 2}, "a": 1}, policy_version="1")
    c = input_fingerprint(workflow_slug="w", intent="i", inputs={"a": 1, "b": {"c": 2, "d": 4}}, policy_version="1")
    assert a == b != c


def test_runs_list_is_newest_first_and_filters():
    wf = make_workflow()
    _, token = make_agent()
    driver = AgentDriver(client_for(token), wf.slug)
    ids = [driver.trigger(intent=f"i{n}")["id"] for n in range(3)]
    listing = driver.client.get("/api/v1/runs/", {"workflow": wf.slug}).json()
    assert [r["id"] for r in listing["results"]] == ids[::-1] and "next" in listing
    only = driver.client.get("/api/v1/runs/", {"intent": "i1"}).json()["results"]
    assert [r["id"] for r in only] == [ids[1]]
    events = driver.client.get(f"/api/v1/runs/{ids[0]}/events/", {"page_size": 2}).json()
    assert [e["seq"] for e in events["results"]] == [1, 2] and events["next"]


def test_event_body_renders_exactly_like_the_serializer():
    """The POST /events/ fast path answers the same JSON as the event list."""
    import json

    from rest_framework.renderers import JSONRenderer

    from ledger.api.shapes import EventOutputSerializer, event_body
    from ledger.models import LedgerEvent

    wf = make_workflow(approval_stages=[])
    _, token = make_agent()
    driver = AgentDriver(client_for(token), wf.slug)
    run = driver.trigger()
    driver.event(run["id"], "discovery", "started", data={"n": 1})
    for event in LedgerEvent.objects.filter(run_id=run["id"]):
        render = JSONRenderer().render
        assert json.loads(render(event_body(event))) == json.loads(render(EventOutputSerializer(event).data))


def test_metrics_report_duplicates_and_unverified_completions_from_the_ledger():
    """SPEC §7 from the ledger: one completed run, one waiting to verify; nothing executed twice."""
    wf = make_workflow(stages=["build", "deploy"], effect_stages=["deploy"], approval_stages=[])
    _, token = make_agent()
    driver = AgentDriver(client_for(token), wf.slug)
    done = driver.trigger(intent="a")
    driver.pass_stage(done["id"], "build")
    driver.pass_stage(done["id"], "deploy", effect_stage=True)
    stuck = driver.trigger(intent="b")
    driver.pass_stage(stuck["id"], "build")
    driver.pass_stage(stuck["id"], "deploy", effect_stage=True, verify=False)
    body = driver.client.get("/api/v1/metrics/", {"workflow": wf.slug}).json()
    assert (body["runs"], body["effects"]) == (2, 2)
    assert body["duplicate_side_effect_rate"] == 0.0 and body["unverified_completion_rate"] == 0.0
    assert body["recovery_decisions"] == {"fresh": 2}
    assert "write_gate_rejection_rate" in body and "stale_claim_as_fact_rate" in body
    assert driver.client.get("/api/v1/metrics/", {"workflow": "nope"}).json()["runs"] == 0


def test_workflow_schedule_becomes_a_beat_entry_and_a_double_fire_is_one_run(django_capture_on_commit_callbacks):
    """A cron schedule set through the API is installed for Celery beat (after commit); two fires in one
    slot make one run."""
    from django_celery_beat.models import PeriodicTask

    from ledger.tasks import workflow_fire

    _, token = make_operator("owner")
    owner = client_for(token)
    with django_capture_on_commit_callbacks(execute=True):
        assert owner.post("/api/v1/workflows/", {"slug": "nightly", "schedule": "0 3 * * *"},
                          format="json").status_code == 201
    entry = PeriodicTask.objects.get(name="workflow: nightly")
    assert (entry.task, entry.crontab.hour, entry.args) == ("ledger.tasks.workflow_fire", "3", '["nightly"]')
    slot = "2026-11-29T03:00:00Z"
    first, second = workflow_fire("nightly", slot), workflow_fire("nightly", slot)
    assert first == second and workflow_fire("nightly", "2026-11-30T03:00:00Z") != first
    with django_capture_on_commit_callbacks(execute=True):
        owner.patch("/api/v1/workflows/nightly/", {"schedule": ""}, format="json")
    assert not PeriodicTask.objects.filter(name="workflow: nightly").exists()
