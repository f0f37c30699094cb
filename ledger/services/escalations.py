"""Opening requests for people, closing escalations and voiding open requests and unspent permits, below every
verb that opens, closes or voids one (the run writer raises an escalation when a run escalates). Each change of
a request's status is a ledger event naming it, written by the run's writer in the same transaction (SPEC §11.2)."""

from __future__ import annotations

from datetime import datetime, timedelta

from ledger.domain.approval_rules import rules_for
from ledger.models import Approval, EventKind, Run
from ledger.services.writer import RunWriter
from stateboard.canonical import digest


def request_open(writer: RunWriter, *, kind: str, stage: str, action: dict, requested_by: str, user=None,
                 data: dict | None = None, amended_from: Approval | None = None) -> Approval:
    """A high-impact or compensation request on ``writer``'s (locked) run, with its ``approval_requested`` event.
    It keeps the approvers and quorum of ``stage``'s ``approval_rules`` in force now (SPEC §17: a compensation
    follows the rules of the stage it compensates), or those of the request it amends (``amended_from``);
    ``data``: more of the event's data (``role``, ``reason``)."""
    run, now = writer.run, writer.now
    approvers, quorum = (amended_from.approvers, amended_from.quorum) if amended_from is not None \
        else rules_for(run.workflow.approval_rules, stage)
    approval = Approval.objects.create(
        kind=kind, run=run, stage=stage, action=action, action_digest=digest(action),
        policy_version=run.workflow.policy_version, input_fingerprint=run.input_fingerprint,
        requested_by=requested_by, requested_by_user=user, created_at=now, approvers=approvers, quorum=quorum,
        amended_from=amended_from, deadline=now + timedelta(seconds=run.workflow.approval_ttl_seconds))
    writer.emit(EventKind.APPROVAL_REQUESTED, stage, data={
        "approval": str(approval.id), "kind": kind, "action": action, **(data or {}), "approvers": approvers,
        "quorum": quorum, **({"amended_from": str(amended_from.id)} if amended_from is not None else {})})
    return approval


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
