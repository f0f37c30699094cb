"""What the events determine, edited in a re-signed file, is refused (SPEC §11.2): an escalation's or a
voided request's status and decider, a run's lease owner, lease id and goal version."""

import pytest
from django.core.management import CommandError
from django.db import transaction

from ledger import services
from ledger.models import Approval, Run
from stateboard.errors import DomainError
from stateboard.roles import actor_for
from tests.factories import make_agent, make_operator, make_workflow
from tests.ledger.test_portability import _export, _import, _lines, _signed, _wipe, export_key  # noqa: F401

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]

STAGES = ["build", "publish", "check"]
INTENTS = ["a", "b", "c"]
ACTION = {"system": "cms", "operation": "publish", "target": "t", "summary": "s"}


class History:
    def __init__(self):
        self.wf = make_workflow(stages=STAGES, effect_stages=["publish"], approval_stages=["publish"], max_retries=1)
        self.agent_user = make_agent()[0]
        self.agent = actor_for(self.agent_user)
        self.editor, self.oncall = make_operator("editor")[0], make_operator("oncall")[0]
        self.owner = make_operator("owner")[0]

    def latest(self, intent):
        return Run.objects.filter(workflow=self.wf, intent=intent, staged=False).order_by("-created_at", "-id").first()

    def act(self, kind, intent):
        run = self.latest(intent)
        try:
            if kind in ("trigger", "staged", "queued"):
                services.run_trigger(workflow_slug=self.wf.slug, intent=intent, inputs={"v": 1},
                                     actor="system" if kind == "queued" else self.agent, staged=kind == "staged")
            elif kind == "lease":
                services.run_lease(user=self.agent_user, workflows=[self.wf.slug])
            elif kind in ("step", "fail") and run is not None:
                stage = next((s for s in STAGES if (run.stage_states.get(s) or {}).get("status")
                              not in ("succeeded", "verified")), None)
                if stage is None:
                    return
                body = {"stage": stage, "kind": "started", **({"action": ACTION} if stage == "publish" else {})}
                if stage == "publish" and kind == "step" and run.state != "execute":
                    services.approval_request(run_id=run.id, kind="high_impact", stage=stage, action=ACTION,
                                              actor=self.agent)
                    return
                services.event_append(run_id=run.id, body=body, actor=self.agent)
                outcome = {"kind": "failed", "reason_code": "boom"} if kind == "fail" else {"kind": "succeeded"}
                if stage == "publish" and kind == "step":
                    outcome["effect"] = {"system": "cms", "operation": "publish", "reference": f"r-{run.id}"}
                services.event_append(run_id=run.id, body={"stage": stage, **outcome}, actor=self.agent)
                if stage == "publish" and kind == "step":
                    services.event_append(run_id=run.id, actor=self.agent, body={"stage": stage, "kind": "verified",
                                          "evidence": [{"uri": "https://x.test/", "observed_at": "2026-12-01T00:00:00Z"}]})
            elif kind == "approve":
                pending = Approval.objects.filter(run__workflow=self.wf, status="pending", kind="high_impact").first()
                if pending is not None:
                    services.approval_decide(approval_id=pending.id, user=self.editor, approve=True)
            elif kind == "goal":
                services.goal_create(workflow_slug=self.wf.slug, intent=intent, objective="o", user=self.owner)
            elif kind in ("retry", "abandon") and run is not None:
                verb = services.run_retry if kind == "retry" else services.run_abandon
                verb(run_id=run.id, user=self.oncall, reason="property")
            elif kind == "rollback" and run is not None:
                services.run_rollback(run_id=run.id, user=self.oncall, to_stage="publish", reason="property")
            elif kind == "expire":
                Run.objects.filter(workflow=self.wf, intent=intent, lease_expires_at__isnull=False).update(
                    lease_expires_at=run.created_at if run else None)
                services.runs_expire_leases()
        except DomainError:
            pass  # refused as the rules say: nothing written

    def decisions(self):
        with transaction.atomic():
            found = {}
            for intent in INTENTS:
                run, _ = services.run_trigger(workflow_slug=self.wf.slug, intent=intent, inputs={"v": 1},
                                              actor="system")
                found[intent] = (run.decision["outcome"], run.decision["reason_code"], run.decision["resume_from"])
            transaction.set_rollback(True)
        return found


def _escalated_and_voided():
    """An escalation retried (closed), one still open, and a request voided by a goal change."""
    history = History()
    for kind, intent in [("trigger", "a"), ("fail", "a"), ("trigger", "a"), ("retry", "a"), ("expire", "a"),
                         ("trigger", "a"), ("trigger", "b"), ("step", "b"), ("step", "b"), ("goal", "b")]:
        history.act(kind, intent)
    assert Approval.objects.filter(kind="escalation", status="approved").exists()
    assert Approval.objects.filter(reason="goal_changed", status="expired").exists()


@pytest.mark.parametrize(("pick", "change", "field"), [
    (lambda r: r["kind"] == "escalation" and r["status"] == "approved", {"status": "pending"}, "status"),
    (lambda r: r["kind"] == "escalation" and r["status"] == "approved", {"decided_by": "user:nobody"}, "decided_by"),
    (lambda r: r["reason"] == "goal_changed", {"status": "pending", "decided_at": None}, "status"),
    (lambda r: r["reason"] == "goal_changed", {"status": "approved", "decided_by": "user:nobody"}, "status"),
])
def test_an_escalation_or_void_edited_and_resigned_is_refused(tmp_path, pick, change, field):
    _escalated_and_voided()
    lines = _lines(_export())[:-1]
    next(line for line in lines if line["type"] == "approval" and pick(line)).update(change)
    _wipe()
    with pytest.raises(CommandError, match=f"approval\\): {field} is"):
        _import(tmp_path, _signed(lines))
    assert not Run.objects.exists()


@pytest.mark.parametrize(("field", "value"), [("lease_owner", "agent:forged"), ("goal_version", 7),
                                              ("lease_id", "00000000-0000-0000-0000-000000000001")])
def test_a_run_lease_or_goal_edited_and_resigned_is_refused(tmp_path, field, value):
    _escalated_and_voided()
    lines = _lines(_export())[:-1]
    next(line for line in lines if line["type"] == "run").update({field: value})
    _wipe()
    with pytest.raises(CommandError, match=f"\\(run\\): {field} is"):
        _import(tmp_path, _signed(lines))
