"""SPEC §15 over the API: ``GET /agents/`` lists the fleet to owners and on-call (last request, runs held, leases
and refusals of the last hour by code, token state); an owner revokes an agent's token (audited), after which
the agent's next call is 401 ``authentication_failed``. The request path records the last request at most once
a minute and records an agent's refused requests only when refused."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from ledger.models import ApiToken, AuditEntry, Run
from tests.factories import client_for, make_agent, make_operator, make_workflow
from tests.ledger.helpers import AgentDriver

pytestmark = pytest.mark.django_db


def _as(role):
    return client_for(make_operator(role)[1])


def _row(client, name) -> dict:
    response = client.get("/api/v1/agents/")
    assert response.status_code == 200, response.content
    rows = {row["name"]: row for row in response.json()["results"]}
    return rows[name]


def test_the_fleet_row_shows_last_request_runs_held_leases_refusals_and_token():
    user, token = make_agent()
    idle, _ = make_agent()
    wf = make_workflow(stages=["build", "ship"], effect_stages=[], approval_stages=[])
    agent = AgentDriver(client_for(token), wf.slug)
    held = agent.trigger(intent="held")["id"]  # the trigger hands it the run: a lease
    _as("editor").post("/api/v1/runs/", {"workflow": wf.slug, "inputs": {}, "intent": "queued"}, format="json")
    leased = agent.lease()["id"]  # a second lease
    agent.event(held, "ship", "started", expect=409)  # refused: not the stage to start
    agent.event(held, "ship", "started", expect=409)
    refused = agent.client.post("/api/v1/runs/", {"workflow": "no-such", "inputs": {}}, format="json")
    assert refused.status_code in (404, 422), refused.content
    for role in ("owner", "oncall"):
        row = _row(_as(role), user.username)
        assert row["token"] == {"state": "active"}
        assert row["last_request_at"] is not None
        assert sorted(row["runs_held"]) == sorted([held, leased])
        assert row["leases_last_hour"] == 2
        codes = row["refusals_last_hour"]
        assert codes[refused.json()["code"]] == 1 and sum(codes.values()) == 3, codes
    quiet = _row(_as("owner"), idle.username)
    assert quiet == {"name": idle.username, "last_request_at": None, "runs_held": [], "leases_last_hour": 0,
                     "refusals_last_hour": {}, "token": {"state": "active"}}


def test_only_the_last_hour_counts_and_a_finished_run_is_not_held():
    user, token = make_agent()
    wf = make_workflow(stages=["work"], effect_stages=[], approval_stages=[])
    agent = AgentDriver(client_for(token), wf.slug)
    run_id = agent.trigger()["id"]
    agent.event(run_id, "work", "started")
    agent.event(run_id, "work", "succeeded")  # the last stage: completed, the lease ends
    assert Run.objects.get(id=run_id).state == "completed"
    agent.event(run_id, "work", "started", expect=409)
    AuditEntry.objects.create(at=timezone.now() - timedelta(hours=2), actor=f"agent:{user.username}", role="agent",
                              action="event_append", outcome="refused", code="old_code")
    row = _row(_as("owner"), user.username)
    assert row["runs_held"] == [] and row["leases_last_hour"] == 1
    assert "old_code" not in row["refusals_last_hour"] and sum(row["refusals_last_hour"].values()) == 1


@pytest.mark.parametrize("role", ["viewer", "editor", "agent"])
def test_other_roles_do_not_read_the_fleet(role):
    client = client_for(make_agent()[1]) if role == "agent" else _as(role)
    response = client.get("/api/v1/agents/")
    assert response.status_code == 403 and response.json()["code"] == "permission_denied"


def test_an_owner_revokes_an_agents_token_audited_and_its_next_call_is_401():
    user, token = make_agent()
    wf = make_workflow(stages=["work"], effect_stages=[], approval_stages=[])
    agent = client_for(token)
    assert agent.get(f"/api/v1/workflows/{wf.slug}/").status_code == 200
    owner, owner_token = make_operator("owner")
    revoked = client_for(owner_token).post(f"/api/v1/agents/{user.username}/revoke/", {"reason": "leaked key"},
                                           format="json")
    assert revoked.status_code == 200, revoked.content
    assert revoked.json()["token"] == {"state": "revoked"} and revoked.json()["name"] == user.username
    refused = agent.get(f"/api/v1/workflows/{wf.slug}/")
    assert refused.status_code == 401 and refused.json()["code"] == "authentication_failed"
    entry = AuditEntry.objects.get(action="token_revoke")
    assert (entry.outcome, entry.actor, entry.reason) == ("done", f"user:{owner.username}", "leaked key")
    assert entry.target.startswith(f"{user.username}:")
    again = client_for(owner_token).post(f"/api/v1/agents/{user.username}/revoke/", {"reason": "again"},
                                         format="json")
    assert again.status_code == 409 and again.json()["code"] == "token_revoked"
    assert AuditEntry.objects.filter(action="token_revoke").count() == 1
    assert _row(client_for(owner_token), user.username)["token"] == {"state": "revoked"}
    deactivated, _ = make_agent()
    deactivated.is_active = False
    deactivated.save(update_fields=["is_active"])
    assert _row(client_for(owner_token), deactivated.username)["token"] == {"state": "revoked"}


def test_revoking_needs_a_reason_and_a_known_agent():
    user, _ = make_agent()
    owner = _as("owner")
    missing = owner.post(f"/api/v1/agents/{user.username}/revoke/", {}, format="json")
    assert missing.status_code == 422 and missing.json()["code"] == "validation_error"
    unknown = owner.post("/api/v1/agents/no-such-agent/revoke/", {"reason": "x"}, format="json")
    assert unknown.status_code == 404 and unknown.json()["code"] == "agent_not_found"
    assert ApiToken.objects.get(user=user).revoked_at is None


@pytest.mark.parametrize("role", ["oncall", "editor", "viewer", "agent"])
def test_only_an_owner_revokes_and_the_refusal_is_audited(role):
    user, token = make_agent()
    client = client_for(make_agent()[1]) if role == "agent" else _as(role)
    refused = client.post(f"/api/v1/agents/{user.username}/revoke/", {"reason": "x"}, format="json")
    assert refused.status_code == 403 and refused.json()["code"] == "permission_denied"
    assert ApiToken.objects.get(user=user).revoked_at is None
    entry = AuditEntry.objects.get(action="agent_revoke")
    assert (entry.outcome, entry.code, entry.target) == ("refused", "permission_denied", user.username)
    assert client_for(token).get("/api/v1/agents/").status_code == 403  # the agent itself still works


def test_the_fleet_reads_in_a_fixed_number_of_queries(django_assert_max_num_queries):
    wf = make_workflow(stages=["work"], effect_stages=[], approval_stages=[])
    owner = _as("owner")
    for n in range(12):
        _, token = make_agent()
        agent = AgentDriver(client_for(token), wf.slug)
        run_id = agent.trigger(intent=f"i-{n}")["id"]
        agent.event(run_id, "work", "succeeded", expect=409)  # a refusal each
    owner.get("/api/v1/agents/")  # the owner's token is used once (its last use written)
    # the token (and its groups: one statement on PostgreSQL, two on SQLite), the agents, runs held, leases, refusals
    with django_assert_max_num_queries(6):
        response = owner.get("/api/v1/agents/")
    rows = response.json()["results"]
    assert len(rows) == 12 and all(len(r["runs_held"]) == 1 and r["leases_last_hour"] == 1 for r in rows)
    assert all(sum(r["refusals_last_hour"].values()) == 1 for r in rows)


# ---------------------------------------------------------------- the request path: one cheap write at most

def _statements(call) -> list[str]:
    with CaptureQueriesContext(connection) as captured:
        call()
    return [q["sql"] for q in captured.captured_queries]


def test_last_request_is_written_at_most_once_a_minute():
    """Two requests a second apart: the first writes the token's last use (one UPDATE), the second sends only the
    token's read and its own; a minute later the next request writes it again."""
    user, token = make_agent()
    wf = make_workflow()
    agent = client_for(token)
    url = f"/api/v1/workflows/{wf.slug}/"
    first = _statements(lambda: agent.get(url))
    second = _statements(lambda: agent.get(url))
    updates = [sql for sql in first if sql.lstrip().upper().startswith("UPDATE")]
    assert len(updates) == 1 and "last_used_at" in updates[0], first
    assert len(second) == len(first) - 1 and not any(s.lstrip().upper().startswith("UPDATE") for s in second), second
    used = ApiToken.objects.get(user=user).last_used_at
    assert used is not None and timezone.now() - used < timedelta(seconds=5)
    ApiToken.objects.filter(user=user).update(last_used_at=used - timedelta(seconds=61))
    later = _statements(lambda: agent.get(url))
    assert len(later) == len(first), later
    assert ApiToken.objects.get(user=user).last_used_at > used


def test_a_refusal_is_recorded_only_when_refused():
    """An agent's accepted request writes no audit entry; a refused one (409) writes one, under its action."""
    user, token = make_agent()
    wf = make_workflow(stages=["work"], effect_stages=[], approval_stages=[])
    agent = AgentDriver(client_for(token), wf.slug)
    run_id = agent.trigger()["id"]
    agent.event(run_id, "work", "started")
    assert not AuditEntry.objects.exists()
    refused = agent.client.post(f"/api/v1/runs/{run_id}/events/", {"stage": "work", "kind": "verified"},
                                format="json")
    assert refused.status_code in (409, 422), refused.content
    entry = AuditEntry.objects.get()
    assert entry.code == refused.json()["code"]
    assert (entry.actor, entry.outcome, entry.action) == (f"agent:{user.username}", "refused", "event_append")
    missing = agent.client.get("/api/v1/runs/00000000-0000-0000-0000-000000000000/")
    assert missing.status_code == 404
    assert AuditEntry.objects.filter(action="run_detail", code=missing.json()["code"]).count() == 1
