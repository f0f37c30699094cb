"""Escalations (one open request for on-call per problem) and voids of open requests and unspent permits,
below every verb that raises, closes or voids one. Each change of a request's status is a ledger event
naming it, written by the run's writer in the same transaction (SPEC §11.2)."""

from __future__ import annotations

from datetime import datetime, timedelta

from ledger.models import Approval, EventKind, Run
from ledger.services.notifications import approval_notify
from ledger.services.writer import RunWriter
from stateboard.canonical import digest


def _recorded(run: Run, writer: RunWriter | None, actor: str, now: datetime, emit) -> None:
    """``emit(writer)`` through the caller's writer (it flushes), else through one of its own, flushed here."""
    own = writer is None
    writer = writer or RunWriter(run, actor, now)
    emit(writer)
    if own:
        writer.flush()


def escalation_raise(run: Run, *, now: datetime, writer: RunWriter | None = None) -> Approval:
    """One open escalation per problem: a pending escalation request for on-call (``escalation_raised``)."""
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
    _recorded(run, writer, "system", now, lambda w: w.emit(
        EventKind.ESCALATION_RAISED, approval.stage, reason_code=reason,
        data={"approval": str(approval.id), "kind": approval.kind, "status": "pending", "action": action}))
    approval_notify(approval)  # on-call, once per escalation request
    return approval


def escalation_close(run: Run, *, status: str, actor: str, role: str, reason: str, now: datetime,
                     writer: RunWriter | None = None) -> None:
    """On-call acted on the escalated run: its open escalation is ``status`` (``escalation_closed``)."""
    closing = list(Approval.objects.select_for_update().filter(run=run, kind=Approval.Kind.ESCALATION,
                                                               status="pending"))
    if not closing:
        return
    for approval in closing:
        approval.status, approval.decided_by, approval.decided_role = status, actor, role
        approval.reason, approval.decided_at = reason, now
        approval.save(update_fields=["status", "decided_by", "decided_role", "reason", "decided_at"])

    def emit(w: RunWriter) -> None:
        for approval in closing:
            w.emit(EventKind.ESCALATION_CLOSED, approval.stage, actor=actor, data={
                "approval": str(approval.id), "kind": approval.kind, "status": status, "decided_by": actor,
                "role": role, "reason": reason})
    _recorded(run, writer, actor, now, emit)


def approvals_void(writer: RunWriter, approvals, *, reason: str) -> int:
    """Open requests (or unspent permits) that no longer cover anything expire, each with an
    ``approval_voided`` event on ``writer``'s run (for a rollback, also those asked by its intent's other
    runs). ``approvals``: a queryset; answers how many."""
    voided = list(approvals.select_for_update().order_by("created_at", "id"))
    for approval in voided:
        before = approval.status
        approval.status, approval.decided_at, approval.reason = "expired", writer.now, reason
        approval.save(update_fields=["status", "decided_at", "reason"])
        writer.emit(EventKind.APPROVAL_VOIDED, approval.stage, reason_code=reason, data={
            "approval": str(approval.id), "kind": approval.kind, "status": "expired", "from": before,
            "reason": reason, **({"run": str(approval.run_id)} if approval.run_id != writer.run.id else {})})
    return len(voided)
