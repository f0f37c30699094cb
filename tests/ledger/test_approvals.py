"""Approvals: single-use permits for exactly one action, four eyes, one decision, audit, expiry."""

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from ledger import services
from ledger.identities import operator_create
from ledger.models import Approval, AuditEntry, Effect, LedgerEvent, Run
from tests.factories import client_for, make_agent, make_operator, make_workflow
from tests.ledger.helpers import EVIDENCE, AgentDriver

ACTION = {"system": "k8s", "operation": "deploy", "target": "prod/web", "summary": "Deploy build 42 to prod"}
STAGES = ["build", "deploy", "verify"]


def _workflow(**fields):
    fields = {"stages": STAGES, "effect_stages": ["deploy"], "approval_stages": ["deploy"], **fields}
    return make_workflow(**fields)


class Crew:
    """A workflow, an agent driving it, and humans in each role, all with real tokens."""

    def __init__(self, **workflow_fields):
        self.wf = _workflow(**workflow_fields)
        self.agent_user, agent_token = make_agent()
        self.agent = AgentDriver(client_for(agent_token), self.wf.slug)
        self.editor, self.editor_token = make_operator("editor")
        self.editor2, self.editor2_token = make_operator("editor")
        self.owner, self.owner_token = make_operator("owner")
        self.oncall, self.oncall_token = make_operator("oncall")
        self.viewer, self.viewer_token = make_operator("viewer")

    def as_(self, token):
        return client_for(token)

    def to_deploy(self, inputs=None) -> str:
        """Trigger a run and pass the stage before the approval stage; returns the run id."""
        run = self.agent.trigger(inputs=inputs)
        assert run["state"] == "fresh", run
        self.agent.pass_stage(run["id"], "build")
        return run["id"]

    def request(self, run_id, action=ACTION, expect=201) -> dict:
        response = self.agent.client.post(f"/api/v1/runs/{run_id}/approvals/",
                                          {"kind": "high_impact", "stage": "deploy", "action": action},
                                          format="json")
        assert response.status_code == expect, response.content
        return response.json()

    def decide(self, approval_id, verb="approve", token=None, reason=None):
        body = {} if reason is None else {"reason": reason}
        return self.as_(token or self.editor_token).post(f"/api/v1/approvals/{approval_id}/{verb}/", body,
                                                         format="json")

    def approved(self, inputs=None) -> tuple[str, dict]:
        """A run waiting at deploy with an approved high-impact request."""
        run_id = self.to_deploy(inputs)
        approval = self.request(run_id)
        response = self.decide(approval["id"])
        assert response.status_code == 200 and response.json()["status"] == "approved", response.content
        return run_id, approval

    def start_deploy(self, run_id, **fields):
        return self.agent.client.post(f"/api/v1/runs/{run_id}/events/",
                                      {"client_event_id": f"deploy-{timezone.now().timestamp()}",
                                       "stage": "deploy", "kind": "started", **fields}, format="json")


def _events(run_id=None):
    return LedgerEvent.objects.filter(run_id=run_id) if run_id else LedgerEvent.objects.all()


def _assert_refused_start(crew, run_id, approval_id, status, code, **fields):
    """A refused start answers ``status``/``code`` and leaves the ledger and the permit untouched."""
    before = (_events().count(), Run.objects.get(id=run_id).state, Effect.objects.count())
    response = crew.start_deploy(run_id, **fields)
    assert response.status_code == status, response.content
    body = response.json()
    assert body["code"] == code
    assert (_events().count(), Run.objects.get(id=run_id).state, Effect.objects.count()) == before
    if approval_id:
        permit = Approval.objects.get(id=approval_id)
        assert permit.consumed_at is None and permit.consumed_seq is None and permit.status == "approved"
    return body


# ---------------------------------------------------------------- permits

@pytest.mark.django_db
def test_permit_payload_change_voids_start():
    """Starting deploy with another action than the approved one is 409 approval_void; nothing changes."""
    crew = Crew()
    run_id, approval = crew.approved()
    changed = {**ACTION, "target": "prod/db"}
    body = _assert_refused_start(crew, run_id, approval["id"], 409, "approval_void", action=changed)
    assert body["reasons"] == ["action_changed"]
    assert Run.objects.get(id=run_id).state == "awaiting_approval"


@pytest.mark.django_db
def test_permit_policy_bump_voids_start():
    """An owner's policy bump after the approval voids the permit (409 approval_void, policy_changed)."""
    crew = Crew()
    run_id, approval = crew.approved()
    response = crew.as_(crew.owner_token).patch(f"/api/v1/workflows/{crew.wf.slug}/",
                                                {"policy_version": "2", "reason": "new deploy policy"},
                                                format="json")
    assert response.status_code == 200 and response.json()["policy_version"] == "2"
    body = _assert_refused_start(crew, run_id, approval["id"], 409, "approval_void", action=ACTION)
    assert body["reasons"] == ["policy_changed"]
    bump = AuditEntry.objects.get(action="policy_bump")
    assert bump.outcome == "done" and bump.actor == f"user:{crew.owner.username}" and bump.reason == "new deploy policy"


@pytest.mark.django_db
def test_permit_input_change_voids_start():
    """An approval given to a run of the same intent with other inputs does not cover this run's start."""
    crew = Crew()
    first_id, approval = crew.approved(inputs={"build": 42})
    # Let the first run go: a second request for the stage expires, the run escalates and on-call abandons it.
    crew.request(first_id, action={**ACTION, "summary": "Deploy build 42, again"})
    assert services.approvals_expire(now=timezone.now() + timedelta(days=2)) == 1
    assert Run.objects.get(id=first_id).state == "escalated"
    response = crew.as_(crew.oncall_token).post(f"/api/v1/runs/{first_id}/abandon/", {"reason": "superseded"},
                                                format="json")
    assert response.status_code == 200 and response.json()["state"] == "abandoned"
    assert Approval.objects.get(id=approval["id"]).status == "approved"

    second_id = crew.to_deploy(inputs={"build": 43})
    assert Run.objects.get(id=second_id).input_fingerprint != Run.objects.get(id=first_id).input_fingerprint
    body = _assert_refused_start(crew, second_id, approval["id"], 409, "approval_void", action=ACTION)
    assert body["reasons"] == ["inputs_changed"]


@pytest.mark.django_db
def test_permit_deadline_passed_voids_start(monkeypatch):
    """An approved permit used after its deadline is void (409 approval_void, deadline_passed)."""
    crew = Crew(approval_ttl_seconds=60)  # the deadline passes while the agent's lease (600 s) still runs
    run_id, approval = crew.approved()
    deadline = Approval.objects.get(id=approval["id"]).deadline
    later = deadline + timedelta(seconds=1)
    monkeypatch.setattr(timezone, "now", lambda: later)
    body = _assert_refused_start(crew, run_id, approval["id"], 409, "approval_void", action=ACTION)
    assert body["reasons"] == ["deadline_passed"]


@pytest.mark.django_db
def test_permit_missing_refuses_start():
    """Starting an approval stage with no approved request is 409 approval_required and writes nothing."""
    crew = Crew()
    run_id = crew.to_deploy()
    _assert_refused_start(crew, run_id, None, 409, "approval_required", action=ACTION)
    pending = crew.request(run_id)
    _assert_refused_start(crew, run_id, None, 409, "approval_required", action=ACTION)
    assert Approval.objects.get(id=pending["id"]).status == "pending"


@pytest.mark.django_db
def test_permit_start_without_action_refused():
    """A start of an approved stage that does not carry the action is 422 action_required."""
    crew = Crew()
    run_id, approval = crew.approved()
    _assert_refused_start(crew, run_id, approval["id"], 422, "action_required")


@pytest.mark.django_db
def test_permit_valid_start_consumes_once():
    """The matching start consumes the permit; a later run of the same fingerprint cannot reuse it."""
    crew = Crew()
    run_id, approval = crew.approved()
    response = crew.start_deploy(run_id, action=ACTION)
    assert response.status_code == 201, response.content
    started = response.json()
    permit = Approval.objects.get(id=approval["id"])
    assert permit.consumed_at is not None and permit.consumed_seq == started["seq"]
    assert started["data"]["approval"] == approval["id"]
    assert Run.objects.get(id=run_id).state == "execute"

    # The deploy fails in execution; the next run resumes at deploy with the same fingerprint.
    crew.agent.event(run_id, "deploy", "failed", reason_code="rollout_failed")
    again = crew.agent.trigger()
    assert again["decision"]["outcome"] == "resume" and again["decision"]["resume_from"] == "deploy", again
    _assert_refused_start(crew, again["id"], None, 409, "approval_required", action=ACTION)
    permit.refresh_from_db()
    assert permit.consumed_seq == started["seq"] and str(permit.run_id) == run_id


@pytest.mark.django_db
def test_permit_request_refused_for_non_approval_stage():
    """A high-impact request names an approval stage; otherwise 422 and the run keeps going."""
    crew = Crew()
    run = crew.agent.trigger()
    response = crew.agent.client.post(f"/api/v1/runs/{run['id']}/approvals/",
                                      {"kind": "high_impact", "stage": "build", "action": ACTION}, format="json")
    assert response.status_code == 422 and response.json()["code"] == "not_an_approval_stage"
    assert Approval.objects.count() == 0 and Run.objects.get(id=run["id"]).state == "fresh"


# ---------------------------------------------------------------- four eyes, one decision

@pytest.mark.django_db
def test_approval_agent_cannot_decide():
    """Agents never decide: 403 for the requesting agent, another agent, and an agent that is also an editor."""
    crew = Crew()
    run_id = crew.to_deploy()
    approval = crew.request(run_id)
    _, other_agent_token = make_agent()
    dual_agent, dual_token = make_agent()
    operator_create(name=dual_agent.username, role="editor")
    for token in (None, other_agent_token, dual_token):
        response = (crew.agent.client if token is None else client_for(token)).post(
            f"/api/v1/approvals/{approval['id']}/approve/", {}, format="json")
        assert response.status_code == 403, response.content
    assert Approval.objects.get(id=approval["id"]).status == "pending"
    assert not _events(run_id).filter(kind="approved").exists()


@pytest.mark.django_db
def test_approval_requester_cannot_decide():
    """A human who requested a (compensation) approval cannot decide it, even holding the editor role."""
    crew = Crew(approval_stages=[])
    run_id = _run_in_compensate(crew)
    operator_create(name=crew.oncall.username, role="editor")  # the on-call engineer is also an editor
    response = crew.as_(crew.oncall_token).post(f"/api/v1/runs/{run_id}/compensate/", {"reason": "rollback"},
                                                format="json")
    assert response.status_code == 200, response.content
    approval_id = response.json()["approval"]["id"]
    refused = crew.decide(approval_id, token=crew.oncall_token)
    assert refused.status_code == 403 and refused.json()["code"] == "requester_cannot_decide"
    assert Approval.objects.get(id=approval_id).status == "pending"
    assert not _events(run_id).filter(kind="approved").exists()
    entry = AuditEntry.objects.get(action="approve")
    assert (entry.outcome, entry.code, entry.actor) == ("refused", "requester_cannot_decide",
                                                        f"user:{crew.oncall.username}")
    assert str(entry.run_id) == run_id and entry.target == approval_id
    assert crew.decide(approval_id).status_code == 200  # another editor may


@pytest.mark.django_db
def test_approval_approve_twice_changes_nothing():
    """A second approve (by any editor) answers 200 and leaves one decision and one approved event."""
    crew = Crew()
    run_id, approval = crew.approved()
    first = Approval.objects.get(id=approval["id"])
    events_before = _events(run_id).count()
    for token in (crew.editor_token, crew.editor2_token):
        response = crew.decide(approval["id"], token=token)
        assert response.status_code == 200 and response.json()["status"] == "approved"
        assert response.json()["decided_by"] == f"user:{crew.editor.username}"
    again = Approval.objects.get(id=approval["id"])
    assert (again.decided_by, again.decided_at) == (first.decided_by, first.decided_at)
    assert _events(run_id).count() == events_before
    assert _events(run_id).filter(kind="approved").count() == 1


@pytest.mark.django_db
def test_approval_reject_after_approve_conflicts():
    """Rejecting an approved request is 409 approval_decided; it stays approved."""
    crew = Crew()
    run_id, approval = crew.approved()
    before = _events(run_id).count()
    response = crew.decide(approval["id"], "reject", token=crew.editor2_token, reason="changed my mind")
    assert response.status_code == 409 and response.json()["code"] == "approval_decided"
    assert Approval.objects.get(id=approval["id"]).status == "approved"
    assert _events(run_id).count() == before and Run.objects.get(id=run_id).state == "awaiting_approval"


@pytest.mark.django_db
def test_approval_approve_after_reject_conflicts():
    """A rejection abandons the waiting run; approving it afterwards is 409 and changes nothing."""
    crew = Crew()
    run_id = crew.to_deploy()
    approval = crew.request(run_id)
    rejected = crew.decide(approval["id"], "reject", reason="not during the freeze")
    assert rejected.status_code == 200 and rejected.json()["status"] == "rejected"
    assert rejected.json()["reason"] == "not during the freeze"
    assert Run.objects.get(id=run_id).state == "abandoned"
    before = _events(run_id).count()
    response = crew.decide(approval["id"], token=crew.editor2_token)
    assert response.status_code == 409 and response.json()["code"] == "approval_decided"
    assert Approval.objects.get(id=approval["id"]).status == "rejected"
    assert _events(run_id).count() == before
    assert crew.decide(approval["id"], "reject", token=crew.editor2_token, reason="same").status_code == 200
    assert _events(run_id).filter(kind="rejected").count() == 1


@pytest.mark.django_db
def test_approval_reject_needs_reason():
    """A rejection without a (non-blank) reason is 422 reason_required; the request stays pending."""
    crew = Crew()
    run_id = crew.to_deploy()
    approval = crew.request(run_id)
    for reason in (None, "", "   "):
        response = crew.decide(approval["id"], "reject", reason=reason)
        assert response.status_code == 422 and response.json()["code"] == "reason_required", response.content
    assert Approval.objects.get(id=approval["id"]).status == "pending"
    assert Run.objects.get(id=run_id).state == "awaiting_approval"
    assert not _events(run_id).filter(kind="rejected").exists()


@pytest.mark.django_db
def test_approval_oncall_cannot_decide_high_impact():
    """High-impact requests are decided by editors only; on-call is refused (403) and audited."""
    crew = Crew()
    run_id = crew.to_deploy()
    approval = crew.request(run_id)
    response = crew.decide(approval["id"], token=crew.oncall_token)
    assert response.status_code == 403
    assert Approval.objects.get(id=approval["id"]).status == "pending"
    assert AuditEntry.objects.filter(action="approve", outcome="refused", actor=f"user:{crew.oncall.username}").exists()


def _decide_in_thread(token, approval_id, verb, reason, barrier, results, index):
    try:
        client = client_for(token)
        barrier.wait(timeout=10)
        body = {"reason": reason} if reason else {}
        response = client.post(f"/api/v1/approvals/{approval_id}/{verb}/", body, format="json")
        results[index] = (verb, response.status_code, response.json())
    except Exception as exc:  # surfaced by the assertions in the test
        results[index] = (verb, "error", repr(exc))
    finally:
        connection.close()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("verbs", [("approve", "reject"), ("reject", "approve"), ("approve", "approve")])
def test_approval_concurrent_decisions_make_one_decision(verbs):
    """Two editors deciding at the same instant: exactly one decision and one decision event."""
    crew = Crew()
    for round_ in range(3):
        run_id = crew.to_deploy(inputs={"round": round_, "verbs": list(verbs)})
        approval = crew.request(run_id)
        barrier, results = threading.Barrier(2), [None, None]
        threads = [threading.Thread(target=_decide_in_thread,
                                    args=(token, approval["id"], verb, "conflicting" if verb == "reject" else "",
                                          barrier, results, i))
                   for i, (token, verb) in enumerate(zip((crew.editor_token, crew.editor2_token), verbs))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        assert all(r is not None and r[1] != "error" for r in results), results
        decided = Approval.objects.get(id=approval["id"])
        assert decided.status in ("approved", "rejected")
        decision_events = _events(run_id).filter(kind__in=("approved", "rejected"))
        assert decision_events.count() == 1
        assert decision_events.get().kind == decided.status
        winner_verb = "approve" if decided.status == "approved" else "reject"
        for verb, status_code, body in results:
            if verb == winner_verb:
                assert status_code == 200 and body["status"] == decided.status, results
            else:
                assert status_code == 409 and body["code"] == "approval_decided", results
        chain = services.chain_verify(run=Run.objects.get(id=run_id))
        assert chain["ok"], chain
        if decided.status == "approved":  # free the intent for the next round
            assert crew.start_deploy(run_id, action=ACTION).status_code == 201
            crew.agent.event(run_id, "deploy", "failed", reason_code="test_round_over")


# ---------------------------------------------------------------- audit

@pytest.mark.django_db
def test_audit_refused_viewer_approval_recorded():
    """A viewer's approve attempt is 403 and leaves a refused audit entry naming them and the run."""
    crew = Crew()
    run_id = crew.to_deploy()
    approval = crew.request(run_id)
    response = crew.decide(approval["id"], token=crew.viewer_token, reason="looks fine")
    assert response.status_code == 403 and response.json()["code"] == "permission_denied"
    entry = AuditEntry.objects.get()
    assert (entry.actor, entry.role, entry.action, entry.outcome, entry.code) == (
        f"user:{crew.viewer.username}", "viewer", "approve", "refused", "permission_denied")
    assert str(entry.run_id) == run_id and entry.target == approval["id"] and entry.reason == "looks fine"
    assert Approval.objects.get(id=approval["id"]).status == "pending"


@pytest.mark.django_db
def test_audit_malformed_ids_are_json_404_and_unknown_ids_still_audited():
    """A malformed id never reaches a view (404 ``not_found``, nothing to audit); a well-formed
    unknown one is refused by the view and audited, never a 500."""
    crew = Crew()
    for url in ("/api/v1/approvals/not-a-uuid/approve/", "/api/v1/runs/not-a-uuid/retry/"):
        response = crew.as_(crew.oncall_token).post(url, {"reason": "x"}, format="json")
        assert response.status_code == 404 and response.json()["code"] == "not_found"
    assert not AuditEntry.objects.exists()
    unknown = "00000000-0000-4000-8000-000000000000"
    viewer = crew.as_(crew.viewer_token).post(f"/api/v1/runs/{unknown}/retry/", {}, format="json")
    assert viewer.status_code == 404 and viewer.json()["code"] == "run_not_found"
    approve = crew.as_(crew.oncall_token).post(f"/api/v1/approvals/{unknown}/approve/", {}, format="json")
    assert approve.status_code == 404 and approve.json()["code"] == "approval_not_found"
    entries = {e.action: e for e in AuditEntry.objects.all()}
    assert set(entries) == {"approve", "retry"}
    assert (entries["retry"].code, entries["retry"].target, entries["retry"].run_id) == ("run_not_found", unknown, None)
    assert (entries["approve"].code, entries["approve"].target, entries["approve"].run_id) == (
        "approval_not_found", unknown, None)


@pytest.mark.django_db
def test_audit_decisions_are_ledger_events_naming_user_role_reason():
    """Approve and reject are ledger events by user:<name>, with the role acted in, the reason, and how the
    person decided (SPEC §17: ``via: web`` for the API and the pages; Slack and e-mail name theirs)."""
    crew = Crew()
    run_id = crew.to_deploy(inputs={"n": 1})
    approval = crew.request(run_id)
    assert crew.decide(approval["id"], reason="release window").status_code == 200
    event = _events(run_id).get(kind="approved")
    assert event.actor == f"user:{crew.editor.username}" and event.stage == "deploy"
    assert event.data["role"] == "editor" and event.data["reason"] == "release window"
    assert event.data["via"] == "web"
    assert event.data["approval"] == approval["id"]
    approval_row = Approval.objects.get(id=approval["id"])
    assert (approval_row.decided_by, approval_row.decided_role) == (f"user:{crew.editor.username}", "editor")

    other = Crew()
    run2 = other.to_deploy()
    approval2 = other.request(run2)
    assert other.decide(approval2["id"], "reject", token=other.editor2_token, reason="freeze").status_code == 200
    rejected = _events(run2).get(kind="rejected")
    assert rejected.actor == f"user:{other.editor2.username}"
    assert (rejected.data["role"], rejected.data["reason"], rejected.data["via"]) == ("editor", "freeze", "web")
    abandoned = _events(run2).filter(kind="transition").order_by("-seq").first()
    assert abandoned.data["to"] == "abandoned" and abandoned.reason_code == "approval_rejected"


# ---------------------------------------------------------------- expiry

@pytest.mark.django_db
def test_approvals_expire_escalates_waiting_run():
    """An undecided request past its deadline expires; the waiting run escalates with an escalation raised."""
    crew = Crew()
    run_id = crew.to_deploy()
    approval = crew.request(run_id)
    assert services.approvals_expire(now=timezone.now() + timedelta(hours=1)) == 0
    assert Approval.objects.get(id=approval["id"]).status == "pending"

    later = timezone.now() + timedelta(seconds=crew.wf.approval_ttl_seconds + 60)
    assert services.approvals_expire(now=later) == 1
    assert Approval.objects.get(id=approval["id"]).status == "expired"
    run = Run.objects.get(id=run_id)
    assert run.state == "escalated"
    escalation = Approval.objects.get(run_id=run_id, kind="escalation")
    assert escalation.status == "pending" and escalation.requested_by == "system"
    assert _events(run_id).filter(kind="expired", data__approval=approval["id"]).count() == 1
    assert services.approvals_expire(now=later) == 0  # safe to run twice
    assert Approval.objects.filter(run_id=run_id, kind="escalation").count() == 1
    late = crew.decide(approval["id"])
    assert late.status_code == 409 and Approval.objects.get(id=approval["id"]).status == "expired"


# ---------------------------------------------------------------- helpers shared with compensation

def _run_in_compensate(crew) -> str:
    """A run whose deploy happened (effect with a reference) and then failed verification."""
    run = crew.agent.trigger()
    crew.agent.pass_stage(run["id"], "build")
    crew.agent.event(run["id"], "deploy", "started")
    crew.agent.event(run["id"], "deploy", "succeeded",
                     effect={"system": "k8s", "operation": "deploy", "reference": "deployment-7781"})
    crew.agent.event(run["id"], "deploy", "failed", reason_code="health_check_failed")
    assert Run.objects.get(id=run["id"]).state == "compensate"
    return run["id"]


@pytest.mark.django_db
def test_approval_compensation_decided_by_editor_only_once():
    """A compensation request is decided by an editor; a repeated approve changes nothing."""
    crew = Crew(approval_stages=[])
    run_id = _run_in_compensate(crew)
    approval = crew.as_(crew.oncall_token).post(f"/api/v1/runs/{run_id}/compensate/", {}, format="json").json()["approval"]
    assert crew.decide(approval["id"], token=crew.oncall_token).status_code == 403  # the requester, not an editor
    assert crew.decide(approval["id"]).status_code == 200
    assert crew.decide(approval["id"], token=crew.editor2_token).status_code == 200
    assert _events(run_id).filter(kind="approved").count() == 1
    assert crew.agent.event(run_id, "deploy", "compensated", action=approval["action"], evidence=EVIDENCE)["kind"] \
        == "compensated"


@pytest.mark.django_db
def test_permit_is_void_for_a_run_triggered_under_an_older_policy():
    """A run fingerprinted under policy 1 cannot use a permit issued after the bump to policy 2."""
    crew = Crew()
    run_id = crew.to_deploy()
    crew.wf.policy_version = "2"
    crew.wf.save(update_fields=["policy_version"])
    approval = crew.request(run_id)
    assert crew.decide(approval["id"]).status_code == 200
    response = crew.start_deploy(run_id, action=ACTION)
    assert response.status_code == 409 and "policy_changed" in response.json()["reasons"]


@pytest.mark.django_db
def test_expired_escalation_request_is_raised_afresh():
    """On-call never loses sight of an escalated run: an expired escalation request is replaced."""
    crew = Crew(max_retries=1)
    escalated = crew.agent.escalated_run()
    services.approvals_expire(now=timezone.now() + timedelta(days=2))
    requests = Approval.objects.filter(run_id=escalated["id"], kind="escalation")
    assert sorted(requests.values_list("status", flat=True)) == ["expired", "pending"]


@pytest.mark.django_db
def test_refusal_with_a_malformed_body_is_still_403_and_audited():
    crew = Crew()
    run_id = crew.to_deploy()
    approval = crew.request(run_id)
    response = crew.as_(crew.viewer_token).generic("POST", f"/api/v1/approvals/{approval['id']}/approve/",
                                                   b"{not json", content_type="application/json")
    assert response.status_code == 403
    assert AuditEntry.objects.filter(action="approve", outcome="refused", code="permission_denied").exists()
