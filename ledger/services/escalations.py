"""Escalations: one open request for on-call per problem (below every verb that raises one)."""

from __future__ import annotations

from datetime import datetime, timedelta

from ledger.models import Approval, Run
from ledger.services.notifications import approval_notify
from stateboard.canonical import digest


def escalation_raise(run: Run, *, now: datetime) -> Approval:
    """One open escalation per problem: a pending escalation request for on-call."""
    existing = Approval.objects.filter(run=run, kind=Approval.Kind.ESCALATION, status="pending").first()
    if existing is not None:
        return existing
    reason = (run.decision or {}).get("reason_code", "") if run.state == "escalated" else ""
    action = {"system": "stateboard", "operation": "resolve_escalation", "target": str(run.id),
              "summary": f"Run escalated ({reason or 'needs on-call'}): retry, compensate or abandon."}
    approval = Approval.objects.create(
        kind=Approval.Kind.ESCALATION, run=run, stage=run.current_stage, action=action, action_digest=digest(action),
        policy_version=run.workflow.policy_version, input_fingerprint=run.input_fingerprint,
        requested_by="system", created_at=now, deadline=now + timedelta(seconds=run.workflow.approval_ttl_seconds))
    approval_notify(approval)  # on-call, once per escalation request
    return approval


def escalation_close(run: Run, *, status: str, actor: str, role: str, reason: str, now: datetime) -> None:
    Approval.objects.filter(run=run, kind=Approval.Kind.ESCALATION, status="pending").update(
        status=status, decided_by=actor, decided_role=role, reason=reason, decided_at=now)

