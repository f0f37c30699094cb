"""Closing escalations and voiding open requests and unspent permits, below every verb that closes or voids
one (the run writer raises an escalation when a run escalates). Each change of a request's status is a
ledger event naming it, written by the run's writer in the same transaction (SPEC §11.2)."""

from __future__ import annotations

from datetime import datetime

from ledger.models import Approval, EventKind, Run
from ledger.services.writer import RunWriter


def escalation_close(run: Run, *, status: str, actor: str, role: str, reason: str, now: datetime,
                     writer: RunWriter) -> None:
    """On-call acted on the escalated run: its open escalation is ``status`` (``escalation_closed`` on ``writer``)."""
    closing = list(Approval.objects.select_for_update().filter(run=run, kind=Approval.Kind.ESCALATION,
                                                               status="pending"))
    for approval in closing:
        approval.status, approval.decided_by, approval.decided_role = status, actor, role
        approval.reason, approval.decided_at = reason, now
        approval.save(update_fields=["status", "decided_by", "decided_role", "reason", "decided_at"])
        writer.emit(EventKind.ESCALATION_CLOSED, approval.stage, actor=actor, data={
            "approval": str(approval.id), "kind": approval.kind, "status": status, "decided_by": actor,
            "role": role, "reason": reason})


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
