"""Rollback to a stage (SPEC §10.2): isolate, optionally compensate, decide the same run again."""

import pytest

from ledger.models import Approval, AuditEntry, Checkpoint, Effect, LedgerEvent, Run
from ledger.selectors import effects_rebuild_diff
from tests.factories import client_for, make_agent, make_operator, make_workflow
from tests.ledger.helpers import EVIDENCE, AgentDriver

pytestmark = pytest.mark.django_db

STAGES = ["build", "commit", "deploy", "verify"]


class Team:
    def __init__(self, **fields):
        self.wf = make_workflow(**{"stages": STAGES, "effect_stages": ["commit", "deploy"], "approval_stages": [],
                                   **fields})
        _, agent_token = make_agent()
        self.agent = AgentDriver(client_for(agent_token), self.wf.slug)
        self.oncall_user, oncall_token = make_operator("oncall")
        self.oncall = client_for(oncall_token)
        _, editor_token = make_operator("editor")
        self.editor = client_for(editor_token)

    def completed_run(self) -> dict:
        run = self.agent.trigger()
        for stage in STAGES:
            self.agent.pass_stage(run["id"], stage, effect_stage=stage in self.wf.effect_stages)
        assert self.agent.run(run["id"])["state"] == "completed"
        return run

    def leased_again(self, run_id):
        """A run decided again after a rollback is queued for an agent, its lease cleared (SPEC §10.2)."""
        run = Run.objects.get(id=run_id)
        assert run.lease_owner == "" and run.lease_id is None and run.queued_until is not None
        assert self.agent.event(run_id, STAGES[0], "started", expect=409)["code"] == "not_leased"
        assert self.agent.lease()["id"] == run_id

    def rollback(self, run_id, client=None, expect=200, **body):
        response = (client or self.oncall).post(f"/api/v1/runs/{run_id}/rollback/", body, format="json")
        assert response.status_code == expect, response.content
        return response.json()


def test_rollback_without_compensation_isolates_and_resumes_from_the_stage():
    """Effects at to_stage or later are isolated; the same run resumes there under the next generation's key."""
    team = Team()
    run = team.completed_run()
    old_deploy = Effect.objects.get(run_id=run["id"], stage="deploy")
    commit = Effect.objects.get(run_id=run["id"], stage="commit")
    body = team.rollback(run["id"], to_stage="deploy", reason="bad config deployed")
    assert body["id"] == run["id"] and body["state"] == "resume"
    assert body["decision"]["reason_code"] == "rolled_back" and body["decision"]["resume_from"] == "deploy"
    assert body["decision"]["retry_count"] == 0
    old_deploy.refresh_from_db()
    commit.refresh_from_db()
    assert old_deploy.status == "isolated" and commit.status == "verified"  # earlier stages keep their results
    rolled = LedgerEvent.objects.get(run_id=run["id"], kind="rolled_back")
    assert rolled.stage == "deploy" and rolled.actor == f"user:{team.oncall_user.username}"
    assert rolled.data["isolated"] == [old_deploy.idempotency_key] and rolled.data["compensate"] is False
    checkpoint = Checkpoint.objects.filter(run_id=run["id"], created_at=rolled.at).get()
    table = checkpoint.payload["state_table"]
    assert table["deploy"]["status"] == "pending" and table["verify"]["status"] == "pending"
    assert table["commit"]["status"] == "verified"

    team.leased_again(run["id"])
    again = team.agent.event(run["id"], "deploy", "started", idempotency_key=old_deploy.idempotency_key, expect=409)
    assert again["code"] == "effect_exists"  # an isolated key is never claimed again
    started = team.agent.event(run["id"], "deploy", "started")
    assert started["idempotency_key"] != old_deploy.idempotency_key
    team.agent.event(run["id"], "deploy", "succeeded", effect={"system": "k8s", "operation": "deploy", "reference": "d2"})
    team.agent.event(run["id"], "deploy", "verified", evidence=EVIDENCE)
    team.agent.pass_stage(run["id"], "verify")
    assert team.agent.run(run["id"])["state"] == "completed"
    assert effects_rebuild_diff() == []
    assert team.agent.client.get(f"/api/v1/runs/{run['id']}/verify-chain/").json()["ok"] is True
    noop = team.agent.trigger()
    assert noop["decision"]["outcome"] == "noop"  # the new generation's verified effect completes the work


def test_rollback_with_compensation_waits_for_the_undo_then_resumes():
    """compensate: true raises a compensation approval for the isolated effects; once performed, resume."""
    team = Team()
    run = team.completed_run()
    body = team.rollback(run["id"], to_stage="commit", reason="wrong branch", compensate=True)
    assert body["state"] == "compensate"
    approval = Approval.objects.get(run_id=run["id"], kind="compensation", status="pending")
    isolated = Effect.objects.filter(run_id=run["id"], status="isolated")
    assert {e.stage for e in isolated} == {"commit", "deploy"}
    assert set(approval.action["target"].split(",")) == {e.reference for e in isolated}
    assert team.editor.post(f"/api/v1/approvals/{approval.id}/approve/", {}, format="json").status_code == 200
    team.leased_again(run["id"])  # API.md: the approved compensation is queued for an agent
    team.agent.event(run["id"], "commit", "compensated", action=approval.action, evidence=EVIDENCE)
    after = team.agent.run(run["id"])
    assert after["state"] == "resume" and after["decision"]["reason_code"] == "rolled_back"
    assert after["decision"]["resume_from"] == "commit"
    assert set(Effect.objects.filter(run_id=run["id"]).values_list("status", flat=True)) == {"compensated"}
    assert effects_rebuild_diff() == []
    team.leased_again(run["id"])
    started = team.agent.event(run["id"], "commit", "started")
    assert started["idempotency_key"] not in {e.idempotency_key for e in isolated}


def test_rollback_compensation_without_reference_escalates():
    """An isolated effect with no reference cannot be undone deterministically: escalated."""
    team = Team(stages=["build", "deploy"], effect_stages=["deploy"])
    run = team.agent.trigger()
    team.agent.pass_stage(run["id"], "build")
    team.agent.event(run["id"], "deploy", "started")
    team.agent.event(run["id"], "deploy", "succeeded", effect={"system": "k8s", "operation": "deploy"})
    team.agent.event(run["id"], "deploy", "verified", evidence=EVIDENCE)
    body = team.rollback(run["id"], to_stage="deploy", compensate=True)
    assert body["state"] == "escalated"
    assert Approval.objects.filter(run_id=run["id"], kind="escalation", status="pending").exists()


def test_rollback_of_a_run_with_a_live_lease_is_409_run_active():
    """A run still executing is refused and nothing is written."""
    team = Team()
    run = team.agent.trigger()
    team.agent.event(run["id"], "build", "started")
    count = LedgerEvent.objects.filter(run_id=run["id"]).count()
    assert team.rollback(run["id"], to_stage="build", expect=409)["code"] == "run_active"
    assert LedgerEvent.objects.filter(run_id=run["id"]).count() == count
    assert AuditEntry.objects.filter(action="rollback", outcome="refused", code="run_active").exists()


def test_rollback_while_another_run_holds_the_intent_is_409():
    """Another run of the intent is active: active_run_exists."""
    team = Team()
    failed = team.agent.trigger()
    team.agent.fail_stage(failed["id"], "build")
    active = team.agent.trigger(inputs={"v": 2})
    assert active["state"] == "fresh"
    assert team.rollback(failed["id"], to_stage="build", expect=409)["code"] == "active_run_exists"


@pytest.mark.parametrize("role", ["editor", "viewer", "agent"])
def test_rollback_by_a_role_that_may_not_is_403_and_audited(role):
    """Only on-call and owners roll back; a refused attempt is an audit entry."""
    team = Team()
    run = team.completed_run()
    if role == "agent":
        user, token = make_agent()
    else:
        user, token = make_operator(role)
    body = team.rollback(run["id"], client=client_for(token), expect=403, to_stage="deploy", reason="try")
    assert body["code"] == "permission_denied"
    entry = AuditEntry.objects.get(action="rollback", outcome="refused", run_id=run["id"])
    assert entry.actor.endswith(user.username) and entry.code == "permission_denied"
    assert Run.objects.get(id=run["id"]).state == "completed"
    assert not Effect.objects.filter(status="isolated").exists()


def test_owner_may_roll_back_and_bad_stage_is_422():
    """An owner may roll back; an unknown to_stage is 422 and changes nothing."""
    team = Team()
    run = team.completed_run()
    _, owner_token = make_operator("owner")
    owner = client_for(owner_token)
    assert team.rollback(run["id"], client=owner, expect=422, to_stage="nope")["code"] == "unknown_stage"
    assert team.rollback(run["id"], client=owner, to_stage="verify")["state"] == "resume"


def test_rollback_queues_the_run_decided_again_and_a_new_lease_fences_the_old_one():
    """After a rollback the run is queued for an agent (no holder, no lease id); an agent leases it
    under a new lease id and its events renew that lease."""
    team = Team()
    run = team.completed_run()
    body = team.rollback(run["id"], to_stage="deploy", reason="bad deploy")
    assert body["state"] == "resume" and body["lease"] is None
    queued = Run.objects.get(id=run["id"])
    assert queued.queued_until is not None and queued.lease_id is None
    _, other_token = make_agent()
    other = AgentDriver(client_for(other_token), team.wf.slug)
    assert other.lease()["id"] == run["id"]
    leased = Run.objects.get(id=run["id"])
    assert leased.queued_until is None and leased.lease_id is not None
    assert LedgerEvent.objects.filter(run_id=run["id"], kind="leased", seq__gt=queued.event_count).count() == 1
    assert team.agent.event(run["id"], "deploy", "started", expect=409)["code"] == "lease_held"
    started = other.event(run["id"], "deploy", "started", lease_id=str(leased.lease_id))
    assert started["kind"] == "started"
