"""Workflow definitions through the services: cron validation, bounds, executors shown to owners only."""

import threading

import pytest
from django.db import connection

from ledger.models import AuditEntry, Workflow
from tests.factories import client_for, make_agent, make_operator, make_workflow


@pytest.mark.django_db
@pytest.mark.parametrize("schedule", ["99 * * * *", "x y z w v", "0 0 30 2 *", "* * *"])
def test_workflow_schedule_invalid_is_refused(schedule):
    """A cron expression that does not parse, or can never fire, is 422 invalid_schedule; nothing is written."""
    _, token = make_operator("owner")
    response = client_for(token).post("/api/v1/workflows/", {"slug": "cron", "schedule": schedule}, format="json")
    assert response.status_code == 422 and response.json()["code"] == "invalid_schedule", response.content
    assert not Workflow.objects.filter(slug="cron").exists()


@pytest.mark.django_db
@pytest.mark.parametrize("field, value, ok", [
    ("lease_seconds", 1, True), ("lease_seconds", 31_536_000, True), ("lease_seconds", 0, False),
    ("checkpoint_ttl_seconds", 31_536_001, False), ("approval_ttl_seconds", 2, True),
    ("max_retries", 100, True), ("max_retries", 101, False), ("max_retries", 0, False),
])
def test_workflow_bounds_are_the_contracts(field, value, ok):
    """Durations take any integer 1..31,536,000 and max_retries 1..100; outside is 422."""
    _, token = make_operator("owner")
    response = client_for(token).post("/api/v1/workflows/", {"slug": "b", field: value}, format="json")
    assert response.status_code == (201 if ok else 422), response.content


@pytest.mark.django_db
def test_workflow_executors_are_shown_to_owners_only():
    """executors (URLs, secret variable names) is in the body for owners only; a bad handler is 422."""
    _, owner_token = make_operator("owner")
    owner = client_for(owner_token)
    executors = {"deploy": {"handler": "webhook", "config": {"url": "http://127.0.0.1:9/x", "secret_env": "STATEBOARD_SECRET_EX_HOOK"}}}
    for stolen in ("SECRET_KEY", "DATABASE_URL", "STATEBOARD_SECRET_OTHER_HOOK"):
        refused = owner.post("/api/v1/workflows/", {"slug": "ex", "executors": {"deploy": {"handler": "webhook", "config": {
            "url": "http://127.0.0.1:9/x", "secret_env": stolen}}}}, format="json")
        assert refused.status_code == 422 and refused.json()["code"] == "secret_env_not_allowed", refused.content
    response = owner.post("/api/v1/workflows/", {"slug": "ex", "executors": executors,
                                                 "schedule_inputs": {"window": "day"},
                                                 "knowledge_scope": {"system": "web"}}, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["executors"] == executors and response.json()["schedule_intent"] == "ex"
    seen = client_for(make_agent()[1]).get("/api/v1/workflows/ex/").json()
    assert "executors" not in seen and seen["knowledge_scope"] == {"system": "web"}
    bad = owner.patch("/api/v1/workflows/ex/", {"executors": {"deploy": {"handler": "nope"}}}, format="json")
    assert bad.status_code == 422 and bad.json()["code"] == "invalid_executors"
    bad = owner.patch("/api/v1/workflows/ex/", {"executors": {"build": {"handler": "record"}}}, format="json")
    assert bad.status_code == 422 and bad.json()["code"] == "invalid_executors"
    bad = owner.patch("/api/v1/workflows/ex/", {"schedule_inputs": [1]}, format="json")
    assert bad.status_code == 422
    bad = owner.patch("/api/v1/workflows/ex/", {"knowledge_scope": {"color": "red"}}, format="json")
    assert bad.status_code == 422 and bad.json()["code"] == "invalid_knowledge_scope"


@pytest.mark.django_db(transaction=True)
def test_workflow_create_duplicate_slug_race_answers_409():
    """Two owners creating one slug at once: one 201, one 409 workflow_exists, never a 500."""
    _, token = make_operator("owner")
    barrier, codes = threading.Barrier(4), []

    def create():
        try:
            barrier.wait()
            codes.append(client_for(token).post("/api/v1/workflows/", {"slug": "race"}, format="json").status_code)
        finally:
            connection.close()

    threads = [threading.Thread(target=create) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(codes) == [201, 409, 409, 409]


@pytest.mark.django_db
def test_workflow_reserved_schedule_trigger_key():
    """A non-schedule trigger with a 'schedule:' key is 422 reserved_trigger_key, unless it duplicates the tick."""
    from ledger.tasks import workflow_fire

    wf = make_workflow(schedule="0 3 * * *", schedule_inputs={"window": "day"})
    run_id = workflow_fire(wf.slug, slot="2026-11-29T03:00:00Z")
    agent = client_for(make_agent()[1])
    other = agent.post("/api/v1/runs/", {"workflow": wf.slug, "trigger_key": "schedule:2026-11-30T03:00:00Z",
                                         "inputs": {}}, format="json")
    assert other.status_code == 422 and other.json()["code"] == "reserved_trigger_key"
    same = agent.post("/api/v1/runs/", {"workflow": wf.slug, "trigger_key": "schedule:2026-11-29T03:00:00Z",
                                        "inputs": {"window": "day", "slot": "2026-11-29T03:00:00Z"}}, format="json")
    assert same.status_code == 200 and same.json()["id"] == run_id and same.json()["duplicate"] is True
    body = same.json()
    assert body["trigger"] == "schedule" and body["intent"] == wf.slug and body["queued"] is True


@pytest.mark.django_db
def test_workflow_admin_policy_fields_are_read_only(admin_client):
    """The admin shows a workflow's policy but cannot change it (the API validates and audits)."""
    wf = make_workflow()
    page = admin_client.get(f"/admin/ledger/workflow/{wf.id}/change/")
    assert page.status_code == 200 and b'name="policy_version"' not in page.content
    assert admin_client.get("/admin/ledger/workflow/add/").status_code == 403
    assert not AuditEntry.objects.exists()
