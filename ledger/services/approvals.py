"""Approvals: requests, human decisions, permits (single-use, for exactly one action), expiry."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import transaction
from django.utils import timezone

from ledger import authorizers
from ledger.domain import approval_rules, recovery
from ledger.models import Approval, EventKind, LedgerEvent, Run
from ledger.services.escalations import approvals_void, request_open
from ledger.services.notifications import approval_notify
from ledger.services.oncall import run_abandon, run_retry
from ledger.services.outbox import EXECUTOR_TASK, outbox_put
from ledger.services.writer import (
    EXECUTOR,
    RunWriter,
    illegal,
    lease_require,
    run_lock,
    stage_status,
    workflow_and_run_lock,
    workflow_spec,
)
from stateboard.canonical import digest
from stateboard.errors import Conflict, Invalid, NotFound
from stateboard.roles import acting_role, actor_for

ACTION_FIELDS = ("system", "operation", "target", "summary")


def action_validate(action, *, params: bool = False) -> dict:
    """The proposed action {system, operation, target, summary} (strings); an executor's also ``params?``."""
    allowed = set(ACTION_FIELDS) | ({"params"} if params else set())
    if not isinstance(action, dict) or not all(isinstance(action.get(f), str) for f in ACTION_FIELDS) \
            or set(action) - allowed or ("params" in action and not isinstance(action["params"], dict)):
        fields = "{system, operation, target, summary" + (", params?}" if params else "}")
        raise Invalid("invalid_action", f"action must be an object {fields} of strings"
                                        + (" (params an object)." if params else "."))
    return action


def high_impact_open(writer: RunWriter, *, stage: str, action: dict, cause: str, user=None,
                     requested_by: str | None = None) -> Approval:
    """Open a high-impact request on a locked run and move it to ``awaiting_approval`` (no lease expiry
    while a human decides)."""
    run = writer.run
    approval = request_open(writer, kind=Approval.Kind.HIGH_IMPACT, stage=stage, action=action,
                            requested_by=requested_by or writer.actor, user=user)
    if run.state != "awaiting_approval":
        run.current_stage = stage
        writer.transition("awaiting_approval", "approval_requested", cause=cause, approval=str(approval.id))
    run.lease_expires_at = None
    approval_notify(approval)  # editors, once per request
    return approval


def _approval_out(approval: Approval) -> dict:
    return {"id": str(approval.id), "kind": approval.kind, "stage": approval.stage, "status": approval.status}


@transaction.atomic
def approval_request(*, run_id, kind: str, stage: str, action, actor: str, user=None) -> tuple[Approval, bool]:
    """An agent asks for a human decision; a high-impact request puts the run in ``awaiting_approval``."""
    run = run_lock(run_id)
    lease_require(run, actor)
    if run.staged:
        raise Conflict("staged_run", "A staged run performs nothing; its approval stages pass without a permit.")
    if kind not in (Approval.Kind.HIGH_IMPACT, Approval.Kind.COMPENSATION):
        raise Invalid("invalid_kind", "kind must be 'high_impact' or 'compensation' (escalations are raised by Stateboard).")
    action = action_validate(action)
    if stage not in run.workflow.stages:
        raise Invalid("unknown_stage", f"Stage {stage!r} is not a stage of workflow {run.workflow.slug!r}.")
    pending = Approval.objects.filter(run=run, stage=stage, kind=kind, status="pending").first()
    if pending is not None:
        if pending.action_digest == digest(action):
            return pending, False
        raise Conflict("approval_pending", "A request for this stage is already pending.", approval=_approval_out(pending))
    now = timezone.now()
    writer = RunWriter(run, actor, now)
    if kind == Approval.Kind.HIGH_IMPACT:
        if stage not in run.workflow.approval_stages:
            raise Invalid("not_an_approval_stage", f"Stage {stage!r} is not an approval stage of this workflow.")
        expected = recovery.first_not_done(workflow_spec(run.workflow), stage_status(run))
        if run.state not in ("fresh", "resume", "checkpointed", "awaiting_approval") or stage != expected:
            raise illegal(run, f"Approval for {stage!r} can be requested when it is the next stage "
                                f"(run is {run.state!r}, next stage {expected!r}).")
    elif run.state not in ("compensate",):
        raise illegal(run, "A compensation is requested for a run in 'compensate'.")
    if kind == Approval.Kind.HIGH_IMPACT:
        approval = high_impact_open(writer, stage=stage, action=action, cause="approval_requested", user=user)
    else:
        approval = request_open(writer, kind=kind, stage=stage, action=action, requested_by=actor, user=user)
        approval_notify(approval)
        writer.renew_lease()
    writer.flush()
    return approval, True


def permit_find(*, run: Run, stage: str, kind: str, action, now: datetime, asked: str = "") -> Approval:
    """The approved, unconsumed permit for exactly this action, policy, input and deadline, locked."""
    asked = asked or f"{kind!r} on {stage!r}"
    permits = Approval.objects.select_for_update().filter(kind=kind, status="approved", consumed_at__isnull=True)
    if kind == Approval.Kind.HIGH_IMPACT:  # a permit outlives the run that asked for it
        permits = permits.filter(run__workflow_id=run.workflow_id, run__intent=run.intent, stage=stage)
    else:
        permits = permits.filter(run=run)
    permit = permits.order_by("-decided_at").first()
    if permit is None:
        raise Conflict("approval_required", f"{asked} needs an approved request first.")
    if action is None:
        raise Invalid("action_required", f"{asked} must carry the approved action object.")
    reasons = [reason for reason, void in (
        ("action_changed", not isinstance(action, dict) or digest(action) != permit.action_digest),
        ("policy_changed", permit.policy_version not in (run.policy_version,) or
         permit.policy_version != run.workflow.policy_version),
        ("inputs_changed", permit.input_fingerprint != run.input_fingerprint),
        ("deadline_passed", now > permit.deadline)) if void]
    if reasons:
        raise Conflict("approval_void", "The approval no longer covers this: " + ", ".join(reasons)
                       + ". Request a fresh approval.", reasons=reasons, approval=str(permit.id))
    return permit


def permit_spend(permit: Approval, event: LedgerEvent) -> None:
    permit.consumed_at, permit.consumed_seq = event.at, event.seq
    permit.save(update_fields=["consumed_at", "consumed_seq"])


def _decide_escalation(approval: Approval, *, approve: bool, user, reason: str, via: str = "web") -> None:
    if approve:
        run_retry(run_id=approval.run_id, user=user, reason=reason or "approved escalation", via=via)
    else:
        run_abandon(run_id=approval.run_id, user=user, reason=reason, via=via)


def _executor_holds(run: Run, stage: str) -> bool:
    """Stateboard's executor holds ``run`` for ``stage`` (SPEC §5.2): it performs the approved action."""
    return run.lease_owner == EXECUTOR and (run.executor_state or {}).get("stage") == stage


def _approval_locked(approval_id) -> tuple[Run, Approval]:
    """The request and its run, both locked (the run first, as every writer of the run takes them)."""
    try:
        run_id = Approval.objects.values_list("run_id", flat=True).get(id=approval_id)
    except (Approval.DoesNotExist, ValueError, TypeError, DjangoValidationError):
        raise NotFound("approval_not_found", f"No approval with id {approval_id}.")
    _, run = workflow_and_run_lock(run_id)
    return run, Approval.objects.select_for_update().get(id=approval_id)


@transaction.atomic
def approval_amend(*, approval_id, user, action, reason: str) -> Approval:
    """An approver amends a pending request instead of deciding it (SPEC §17): the new ``action`` satisfies the
    stage's ``action_schema`` (422 ``invalid_action``); the request is voided (``approval_voided``, reason
    ``amended``) and a new one opened for the amended action with the same approvers and quorum, ``amended_from``
    it, and the amender as its requester (so they cannot approve it)."""
    run, approval = _approval_locked(approval_id)
    authorizers.may_amend_approval(user, approval)
    if approval.status != "pending":
        raise Conflict("approval_decided", f"This request is already {approval.status}.", status=approval.status)
    if not isinstance(reason, str) or not reason.strip():
        raise Invalid("reason_required", "An amendment needs a reason.")
    now = timezone.now()
    if now > approval.deadline:
        raise Conflict("approval_expired", "The decision deadline has passed; the request expired.")
    problem = approval_rules.action_problem(approval_rules.action_schema_of(run.workflow.approval_rules,
                                                                            approval.stage), action)
    if problem is not None:
        raise Invalid("invalid_action", problem)
    executor_stage = _executor_holds(run, approval.stage)
    if executor_stage:  # Stateboard's executor performs it: its handler's action shape too
        action = action_validate(action, params=True)
    actor = actor_for(user)
    writer = RunWriter(run, actor, now)
    approvals_void(writer, Approval.objects.filter(id=approval.id), reason="amended")
    amended = request_open(writer, kind=approval.kind, stage=approval.stage, action=action, requested_by=actor,
                           user=user, data={"reason": reason.strip()}, amended_from=approval)
    if executor_stage:
        run.executor_state = {**run.executor_state, "action": action}
    approval_notify(amended)
    writer.flush()
    return amended


@transaction.atomic
def approval_decide(*, approval_id, user, approve: bool, reason: str = "", via: str = "web") -> Approval:
    """Approve (a vote: approved once ``quorum`` distinct approvers voted, SPEC §17) or reject (at once) a pending
    request. Repeating the same vote or decision changes nothing; a conflicting one is 409. ``via`` names how the
    person decided (SPEC §17): ``web`` (the pages and the API), ``slack``, ``email``."""
    run, approval = _approval_locked(approval_id)
    actor, verb = actor_for(user), ("approve" if approve else "reject")
    authorizers.may_decide_approval(user, approval)
    role = acting_role(user, set(authorizers.deciding_roles(approval)))
    wanted = "approved" if approve else "rejected"
    if approval.status == wanted:
        return approval
    if approval.status != "pending":
        raise Conflict("approval_decided", f"This request is already {approval.status}.", status=approval.status)
    if not approve and not reason.strip():
        raise Invalid("reason_required", "A rejection needs a reason.")
    now = timezone.now()
    if approval.status == "pending" and now > approval.deadline:
        raise Conflict("approval_expired", "The decision deadline has passed; the request expired.")
    if approval.kind == Approval.Kind.ESCALATION:
        _decide_escalation(approval, approve=approve, user=user, reason=reason, via=via)
        approval.refresh_from_db()
        return approval
    writer = RunWriter(run, actor, now)
    data = {"approval": str(approval.id), "kind": approval.kind, "role": role, "reason": reason,
            **({"via": via} if via else {})}
    if approve:
        if approval_rules.vote_of(approval.votes, actor) is not None:
            return approval  # the same person approving twice changes nothing
        approval.votes = [*approval.votes, approval_rules.vote(by=actor, at=now, reason=reason)]
        data.update(votes=len(approval.votes), quorum=approval.quorum)
        if len(approval.votes) < approval.quorum:  # SPEC §17: a vote, the request still pending
            approval.save(update_fields=["votes"])
            writer.emit(EventKind.APPROVAL_VOTED, approval.stage, reason_code=verb, data=data)
            writer.flush()
            return approval
    approval.status, approval.decided_by, approval.decided_role = wanted, actor, role
    approval.reason, approval.decided_at = reason, now
    approval.save(update_fields=["status", "decided_by", "decided_role", "reason", "decided_at", "votes"])
    writer.emit(EventKind.APPROVED if approve else EventKind.REJECTED, approval.stage, reason_code=verb, data=data)
    executor_stage = _executor_holds(run, approval.stage)
    if approve and run.state == "awaiting_approval" and executor_stage:
        # The executor performs the approved action: its task is sent once this commits (SPEC §5.2).
        run.executor_state = {**run.executor_state, "since": now.isoformat()}
        outbox_put(task=EXECUTOR_TASK, args=[str(run.id), approval.stage],
                   dedupe_key=f"executor:{run.id}:{approval.stage}:approval:{approval.id}")
    elif approve and run.state == "awaiting_approval":
        # The human has decided: the agent's lease runs again, so a dead agent is still noticed.
        run.lease_expires_at = now + timedelta(seconds=run.workflow.lease_seconds)
    elif approve and approval.kind == Approval.Kind.COMPENSATION and run.state == "compensate":
        # API.md: on a stage with an executor the executor performs the approved compensation; otherwise
        # the run is queued for an agent unless its agent still holds the lease (the holder posts ``compensated``).
        if approval.stage in (run.workflow.executors or {}) and run.lease_owner != EXECUTOR:
            writer.executor_hold(stage=approval.stage, action=approval.action, compensation=str(approval.id))
            outbox_put(task=EXECUTOR_TASK, args=[str(run.id), approval.stage],
                       dedupe_key=f"executor:{run.id}:{approval.stage}:compensation:{approval.id}")
        elif not run.lease_owner:
            writer.queue()
    if not approve:
        if approval.kind == Approval.Kind.HIGH_IMPACT and run.state == "awaiting_approval":
            writer.transition("abandoned", "approval_rejected", cause="rejected", reason=reason)
        elif approval.kind == Approval.Kind.COMPENSATION and run.state == "compensate":
            writer.transition("escalated", "compensation_rejected", cause="rejected", reason=reason)
    writer.flush()
    return approval


def approvals_expire(*, now: datetime | None = None) -> int:
    """Sweep: undecided requests past their deadline expire; a waiting run escalates. Safe to run twice."""
    now = now or timezone.now()
    expired = 0
    for approval_id, run_id in (Approval.objects.filter(status="pending", deadline__lte=now)
                                .values_list("id", "run_id")[:1000]):
        with transaction.atomic():
            run = run_lock(run_id)
            approval = Approval.objects.select_for_update().get(id=approval_id)
            if approval.status != "pending":
                continue
            approval.status, approval.decided_at = "expired", now
            approval.save(update_fields=["status", "decided_at"])
            writer = RunWriter(run, "system", now)
            writer.emit(EventKind.EXPIRED, approval.stage, reason_code="approval_expired",
                        data={"approval": str(approval.id), "kind": approval.kind})
            if approval.kind != Approval.Kind.ESCALATION and run.state in ("awaiting_approval", "compensate"):
                writer.transition("escalated", "approval_expired", cause="expired", approval=str(approval.id))
            elif approval.kind == Approval.Kind.ESCALATION and run.state == "escalated":
                writer.escalation_raise()  # an expired escalation is raised afresh: on-call must still see it
            writer.flush()
            expired += 1
    return expired


