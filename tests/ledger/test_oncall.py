"""On-call decisions on escalated runs: retry, abandon (with a reason), compensate (approved, verified)."""

from datetime import timedelta

import pytest
from django.utils import timezone

from ledger import services
from ledger.identities import operator_create
from ledger.models import Approval, AuditEntry, Effect, LedgerEvent, Run
from tests.factories import client_for, make_agent, make_operator, make_workflow
from tests.ledger.helpers import EVIDENCE, AgentDriver

pytestmark = pytest.mark.django_db

STAGES = ["build", "deploy", "verify"]


class OnCall:
    """A workflow without approval stages (compensation is the subject here) and one person per role."""

    def __init__(self, **workflow_fields):
        fields = {"stages": STAGES, "effect_stages": ["deploy"], "approval_stages": [], **workflow_fields}
        self.wf = make_workflow(**fields)
        _, agent_token = make_agent()
        self.agent = AgentDriver(client_for(agent_token), self.wf.slug)
        self.oncall, oncall_token = make_operator("oncall")
        self.editor, editor_token = make_operator("editor")
        self.viewer, viewer_token = make_operator("viewer")
        self.oncall_client, self.editor_client = client_for(oncall_token), client_for(editor_token)
        self.viewer_client = client_for(viewer_token)

    def act(self, run_id, verb, client=None, **body):
        return (client or self.oncall_client).post(f"/api/v1/runs/{run_id}/{verb}/", body, format="json")

    def escalated_by_retries(self) -> str:
        """Fail the first stage max_retries times; the next trigger is escalated."""
        for _ in range(self.wf.max_retries):
            run = self.agent.trigger()
            assert run["state"] == "fresh", run
            self.agent.event(run["id"], "build", "started")
            self.agent.event(run["id"], "build", "failed", reason_code="compiler_crashed")
            assert self.agent.run(run["id"])["state"] == "failed"
        run = self.agent.trigger()
        assert run["state"] == "escalated" and run["decision"]["reason_code"] == "retry_budget_exhausted", run
        return run["id"]

    def in_compensate(self, reference="deployment-7781") -> str:
        """Deploy happened (an effect with ``reference``), then verification found it broken."""
        run = self.agent.trigger()
        self.agent.pass_stage(run["id"], "build")
        self.agent.event(run["id"], "deploy", "started")
        self.agent.event(run["id"], "deploy", "succeeded",
                         effect={"system": "k8s", "operation": "deploy", "reference": reference})
        self.agent.event(run["id"], "deploy", "failed", reason_code="health_check_failed")
        assert Run.objects.get(id=run["id"]).state == "compensate"
        return run["id"]

    def compensated_event(self, run_id, expect=201, **fields):
        return self.agent.event(run_id, "deploy", "compensated", expect=expect, **fields)


def _events(run_id, **filters):
    return LedgerEvent.objects.filter(run_id=run_id, **filters).order_by("seq")


# ---------------------------------------------------------------- retry

def test_escalated_run_retry_returns_to_recovery():
    """On-call retry names the user and role, starts the budget afresh and answers the new decision."""
    team = OnCall(max_retries=2)
    run_id = team.escalated_by_retries()
    escalation = Approval.objects.get(run_id=run_id, kind="escalation", status="pending")
    old_decided_at = Run.objects.get(id=run_id).decided_at

    response = team.act(run_id, "retry", reason="compiler fixed upstream")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["id"] == run_id and body["state"] == "fresh"
    assert body["decision"]["outcome"] == "fresh" and body["decision"]["retry_count"] == 0
    run = Run.objects.get(id=run_id)
    assert run.state != "escalated" and run.decided_at > old_decided_at and run.retried_at is not None
    retried = _events(run_id, kind="retried").get()
    assert retried.actor == f"user:{team.oncall.username}"
    assert retried.data == {"role": "oncall", "reason": "compiler fixed upstream", "via": "web"}
    closed = _events(run_id, seq=retried.seq + 1).get()  # the escalation, closed by the retry
    assert (closed.kind, closed.data["approval"], closed.data["status"]) == ("escalation_closed", str(escalation.id),
                                                                           "approved")
    after = [(e.kind, e.data.get("to")) for e in _events(run_id, seq__gt=closed.seq)]
    assert after[0] == ("transition", "restore") and ("decided", None) in after and after[-1] == ("transition", "fresh")
    escalation.refresh_from_db()
    assert escalation.status == "approved" and escalation.decided_by == f"user:{team.oncall.username}"
    # The run is live again, queued for an agent: one leases it and starts the first stage.
    assert body["queued"] is True and body["lease"] is None
    assert team.agent.lease()["id"] == run_id
    team.agent.event(run_id, "build", "started")
    assert team.agent.run(run_id)["state"] == "execute"


def test_a_retried_run_nobody_leased_does_not_spend_the_retry_budget():
    """SPEC §3: max_retries=1, a build fails, the next trigger escalates; on-call retries; nobody leases the
    retried run and it fails not_leased — it never ran, so the next trigger resumes instead of escalating."""
    from datetime import timedelta

    from django.utils import timezone

    from ledger import services

    team = OnCall(max_retries=1)
    run_id = team.escalated_by_retries()
    assert team.act(run_id, "retry", reason="try again").status_code == 200
    assert services.runs_expire_leases(now=timezone.now() + timedelta(days=1)) == 1
    assert Run.objects.get(id=run_id).ended_reason == "not_leased"
    again = team.agent.trigger()
    assert again["decision"]["outcome"] != "escalated", again["decision"]
    assert again["decision"]["retry_count"] == 0


def test_retry_refused_unless_escalated():
    """Retrying a run that is not escalated is 409 illegal_transition, writes nothing, and is audited."""
    team = OnCall()
    run = team.agent.trigger()
    before = _events(run["id"]).count()
    response = team.act(run["id"], "retry", reason="why not")
    assert response.status_code == 409 and response.json()["code"] == "illegal_transition"
    assert _events(run["id"]).count() == before and Run.objects.get(id=run["id"]).state == "fresh"
    entry = AuditEntry.objects.get(action="retry")
    assert (entry.outcome, entry.code, str(entry.run_id)) == ("refused", "illegal_transition", run["id"])


def test_oncall_actions_refused_for_other_roles_and_audited():
    """Editors, viewers and agents (even one holding on-call) cannot retry/abandon; each attempt is audited."""
    team = OnCall(max_retries=1)
    run_id = team.escalated_by_retries()
    dual_agent, dual_token = make_agent()
    operator_create(name=dual_agent.username, role="oncall")
    attempts = [(team.editor_client, "retry"), (team.viewer_client, "abandon"), (team.agent.client, "retry"),
                (client_for(dual_token), "retry")]
    for client, verb in attempts:
        response = team.act(run_id, verb, client=client, reason="let me")
        assert response.status_code == 403, (verb, response.content)
    assert Run.objects.get(id=run_id).state == "escalated"
    assert not _events(run_id, kind__in=("retried", "abandoned")).exists()
    refused = AuditEntry.objects.filter(run_id=run_id, outcome="refused")
    assert refused.count() == len(attempts)
    assert set(refused.values_list("actor", flat=True)) >= {f"user:{team.editor.username}",
                                                            f"user:{team.viewer.username}"}


def test_escalation_approval_decided_by_oncall_only():
    """The system-raised escalation request is resolved by on-call (approve = retry), not by an editor."""
    team = OnCall(max_retries=1)
    run_id = team.escalated_by_retries()
    escalation = Approval.objects.get(run_id=run_id, kind="escalation")
    refused = team.editor_client.post(f"/api/v1/approvals/{escalation.id}/approve/", {}, format="json")
    assert refused.status_code == 403 and Run.objects.get(id=run_id).state == "escalated"
    response = team.oncall_client.post(f"/api/v1/approvals/{escalation.id}/approve/", {"reason": "retry it"},
                                       format="json")
    assert response.status_code == 200 and response.json()["status"] == "approved", response.content
    assert Run.objects.get(id=run_id).state == "fresh"
    assert _events(run_id, kind="retried").get().actor == f"user:{team.oncall.username}"


# ---------------------------------------------------------------- abandon

def test_escalated_run_abandon_needs_reason():
    """Abandon without a reason is 422 reason_required; with one the run ends abandoned, naming who and why."""
    team = OnCall(max_retries=1)
    run_id = team.escalated_by_retries()
    before = _events(run_id).count()
    for body in ({}, {"reason": ""}, {"reason": "  "}):
        response = team.act(run_id, "abandon", **body)
        assert response.status_code == 422 and response.json()["code"] == "reason_required", response.content
    assert _events(run_id).count() == before and Run.objects.get(id=run_id).state == "escalated"
    assert AuditEntry.objects.filter(run_id=run_id, action="abandon", outcome="refused",
                                     code="reason_required").count() == 3

    response = team.act(run_id, "abandon", reason="source repository archived")
    assert response.status_code == 200 and response.json()["state"] == "abandoned", response.content
    run = Run.objects.get(id=run_id)
    assert run.state == "abandoned" and run.ended_at is not None
    abandoned = _events(run_id, kind="abandoned").get()
    assert abandoned.actor == f"user:{team.oncall.username}"
    assert abandoned.data == {"role": "oncall", "reason": "source repository archived", "via": "web"}
    assert _events(run_id).last().data == {"from": "escalated", "to": "abandoned", "cause": "abandoned",
                                           "reason": "source repository archived"}
    assert Approval.objects.get(run_id=run_id, kind="escalation").status == "rejected"
    assert team.act(run_id, "retry", reason="oops").status_code == 409


# ---------------------------------------------------------------- compensate

def test_compensate_needs_approved_compensation_and_ends_compensated():
    """Proposed by on-call, approved by an editor, executed and verified by the agent → compensated."""
    team = OnCall()
    run_id = team.in_compensate(reference="deployment-7781")
    effect = Effect.objects.get(run_id=run_id)
    assert effect.status == "effective"
    undo = {"system": "k8s", "operation": "compensate", "target": "deployment-7781",
            "summary": "rollback k8s:deployment-7781"}

    refused = team.compensated_event(run_id, expect=409, action=undo, evidence=EVIDENCE)
    assert refused["code"] == "approval_required"

    response = team.act(run_id, "compensate", reason="bad rollout")
    assert response.status_code == 200, response.content
    proposal = response.json()["approval"]
    assert proposal["kind"] == "compensation" and proposal["status"] == "pending"
    assert proposal["action"] == undo  # deterministic: from the ledger's recorded reference
    assert response.json()["state"] == "compensate"
    assert _events(run_id, kind="approval_requested").get().actor == f"user:{team.oncall.username}"
    assert team.compensated_event(run_id, expect=409, action=undo, evidence=EVIDENCE)["code"] == "approval_required"

    approved = team.editor_client.post(f"/api/v1/approvals/{proposal['id']}/approve/", {}, format="json")
    assert approved.status_code == 200 and approved.json()["status"] == "approved"
    before = _events(run_id).count()
    assert team.compensated_event(run_id, expect=422, action=undo)["code"] == "evidence_required"
    assert team.compensated_event(run_id, expect=422, evidence=EVIDENCE)["code"] == "action_required"
    other = {**undo, "target": "deployment-0001"}
    assert team.compensated_event(run_id, expect=409, action=other, evidence=EVIDENCE)["code"] == "approval_void"
    assert _events(run_id).count() == before

    event = team.compensated_event(run_id, action=undo, evidence=EVIDENCE)
    assert event["data"]["approval"] == proposal["id"]
    run = Run.objects.get(id=run_id)
    assert run.state == "compensated" and run.ended_at is not None
    effect.refresh_from_db()
    assert effect.status == "compensated"
    permit = Approval.objects.get(id=proposal["id"])
    assert permit.consumed_seq == event["seq"]
    assert _events(run_id).last().data["to"] == "compensated"


def test_compensation_permit_void_after_policy_bump():
    """An approved compensation is a permit too: a policy bump voids it (409 approval_void), nothing changes."""
    team = OnCall()
    run_id = team.in_compensate()
    proposal = team.act(run_id, "compensate").json()["approval"]
    assert team.editor_client.post(f"/api/v1/approvals/{proposal['id']}/approve/", {}, format="json").status_code == 200
    owner_token = make_operator("owner")[1]
    bumped = client_for(owner_token).patch(f"/api/v1/workflows/{team.wf.slug}/", {"policy_version": "2"}, format="json")
    assert bumped.status_code == 200
    before = _events(run_id).count()
    refused = team.compensated_event(run_id, expect=409, action=proposal["action"], evidence=EVIDENCE)
    assert refused["code"] == "approval_void" and refused["reasons"] == ["policy_changed"]
    assert _events(run_id).count() == before and Run.objects.get(id=run_id).state == "compensate"
    assert Approval.objects.get(id=proposal["id"]).consumed_at is None
    assert Effect.objects.get(run_id=run_id).status == "effective"


def test_escalated_run_compensate_ends_compensated():
    """A rejected compensation escalates the run; on-call proposes again from escalated; approved → compensated."""
    team = OnCall()
    run_id = team.in_compensate()
    first = team.act(run_id, "compensate").json()["approval"]
    rejected = team.editor_client.post(f"/api/v1/approvals/{first['id']}/reject/", {"reason": "wrong target"},
                                       format="json")
    assert rejected.status_code == 200
    assert Run.objects.get(id=run_id).state == "escalated"
    assert Approval.objects.get(run_id=run_id, kind="escalation").status == "pending"

    response = team.act(run_id, "compensate", reason="try the rollback again")
    assert response.status_code == 200 and response.json()["state"] == "compensate", response.content
    second = response.json()["approval"]
    assert second["id"] != first["id"] and second["status"] == "pending"
    assert Approval.objects.get(run_id=run_id, kind="escalation").status == "approved"
    assert team.editor_client.post(f"/api/v1/approvals/{second['id']}/approve/", {}, format="json").status_code == 200
    # Nobody held the escalated run: the approved compensation is queued for an agent (API.md), which
    # leases it and posts `compensated` as its lease holder.
    assert Run.objects.get(id=run_id).queued_until is not None
    assert team.compensated_event(run_id, expect=409, action=second["action"],
                                  evidence=EVIDENCE)["code"] == "not_leased"
    assert team.agent.lease()["id"] == run_id
    team.compensated_event(run_id, action=second["action"], evidence=EVIDENCE)
    assert Run.objects.get(id=run_id).state == "compensated"
    assert set(Effect.objects.filter(run_id=run_id).values_list("status", flat=True)) == {"compensated"}
    path = [e.data.get("to") for e in _events(run_id, kind="transition")]
    assert path[-4:] == ["compensate", "escalated", "compensate", "compensated"]


def test_compensate_without_reference_escalates():
    """An effect with no recorded reference cannot be undone deterministically: the run is escalated."""
    team = OnCall()
    run_id = team.in_compensate(reference="")
    response = team.act(run_id, "compensate", reason="undo it")
    assert response.status_code == 200, response.content
    assert response.json()["state"] == "escalated" and response.json()["approval"] is None
    assert not Approval.objects.filter(run_id=run_id, kind="compensation").exists()
    last = _events(run_id, kind="transition").last()
    assert last.reason_code == "compensation_not_deterministic"
    assert _events(run_id).last().kind == "escalation_raised"  # on-call must still see it
    assert Approval.objects.get(run_id=run_id, kind="escalation").status == "pending"
    assert Effect.objects.get(run_id=run_id).status == "effective"


def test_compensate_refused_on_a_healthy_run():
    """Compensation is for escalated runs (or runs in compensate): anything else is 409 and writes nothing."""
    team = OnCall()
    run = team.agent.trigger()
    before = _events(run["id"]).count()
    response = team.act(run["id"], "compensate")
    assert response.status_code == 409 and response.json()["code"] == "illegal_transition"
    assert _events(run["id"]).count() == before and not Approval.objects.exists()


def test_an_approved_compensation_no_agent_leased_in_time_stays_on_the_queue():
    """A run in `compensate` has no lease expiry: the lease sweep offers a lapsed compensation again
    instead of failing the run, and an agent that leases it later still performs it."""
    team = OnCall()
    run_id = team.in_compensate()
    first = team.act(run_id, "compensate").json()["approval"]
    team.editor_client.post(f"/api/v1/approvals/{first['id']}/reject/", {"reason": "wrong target"}, format="json")
    assert Run.objects.get(id=run_id).state == "escalated"  # nobody holds it now
    approval = team.act(run_id, "compensate", reason="again").json()["approval"]
    assert team.editor_client.post(f"/api/v1/approvals/{approval['id']}/approve/", {}, format="json").status_code == 200
    Run.objects.filter(id=run_id).update(queued_until=timezone.now() - timedelta(seconds=1))
    assert team.agent.lease(expect=204) is None  # lapsed: no longer offered
    services.runs_expire_leases()
    run = Run.objects.get(id=run_id)
    assert run.state == "compensate" and run.queued_until > timezone.now()
    assert team.agent.lease()["id"] == run_id
    team.compensated_event(run_id, action=approval["action"], evidence=EVIDENCE)
    assert Run.objects.get(id=run_id).state == "compensated"


def test_compensate_again_while_the_approved_compensation_is_still_owed_answers_that_approval():
    """On a run in `compensate` whose compensation is approved and not yet performed, on-call's compensate
    asks editors nothing new: it answers the approved request (no second approval, no new event)."""
    team = OnCall()
    run_id = team.in_compensate()
    approval = team.act(run_id, "compensate").json()["approval"]
    assert team.editor_client.post(f"/api/v1/approvals/{approval['id']}/approve/", {}, format="json").status_code == 200
    events = _events(run_id).count()
    again = team.act(run_id, "compensate", reason="did it go through?")
    assert again.status_code == 200 and again.json()["approval"]["id"] == approval["id"]
    assert again.json()["approval"]["status"] == "approved"
    assert Approval.objects.filter(run_id=run_id, kind="compensation").count() == 1
    assert _events(run_id).count() == events and Run.objects.get(id=run_id).state == "compensate"
