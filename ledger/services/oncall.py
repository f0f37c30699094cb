"""On-call: retry, abandon and compensate escalated runs."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.utils import timezone

from ledger import authorizers, selectors
from ledger.domain import effects, recovery
from ledger.models import HOLDING_STATES, Approval, EventKind, Run
from ledger.services.audit import refusal_audit
from ledger.services.escalations import approvals_void, escalation_close, request_open
from ledger.services.goals import goal_fingerprint, goal_latest_adopt, goal_newer
from ledger.services.notifications import approval_notify
from ledger.services.runs import (
    dead_leases_expire,
    decision_apply,
    holding_runs,
    recovery_input_gather,
    workflow_active_require,
)
from ledger.services.writer import RunWriter, illegal, lease_expired, run_lock, workflow_and_run_lock
from stateboard.errors import Conflict, DomainError, Invalid
from stateboard.roles import acting_role, actor_for


def _oncall(user, run, may) -> tuple[str, str]:
    """``may`` is the action's authorizer; answers the actor and the role they act in."""
    may(user, run)
    return actor_for(user), acting_role(user, set(authorizers.ONCALL_ROLES))


_NOT_APPLICABLE = {"retry": "Only an escalated run can be retried",
                   "compensate": "Only an escalated run (or one in 'compensate') can be compensated",
                   "abandon": "Only an escalated run can be abandoned"}


def oncall_refusal(action: str, run: Run) -> str:
    """Why on-call's ``action`` does not apply to ``run`` now, as ``Run.oncall_actions`` says ("" when it does)."""
    return "" if action in run.oncall_actions else f"{_NOT_APPLICABLE[action]} (this one is {run.state!r})."


def _applies_require(action: str, run: Run) -> None:
    refusal = oncall_refusal(action, run)
    if refusal:
        raise illegal(run, refusal)


def retry_input(run: Run, *, others: list[Run], now: datetime) -> tuple[recovery.RecoveryInput, dict]:
    """What an on-call retry at ``now`` decides ``run`` on, read before the retry writes anything: ``run_retry``
    and the on-call page's preview ask this. ``others``: the intent's other holding or escalated runs
    (``holding_runs``), less those whose lease lapsed (the retry fails them); under the intent's latest goal
    (``goal_changed`` when it is newer than the run's); the retry starts the budget afresh."""
    newer = goal_newer(run)
    return recovery_input_gather(
        workflow=run.workflow, intent=run.intent, policy_version=run.policy_version,
        fingerprint=run.input_fingerprint if newer is None else goal_fingerprint(run, newer),
        env_fingerprint=run.env_fingerprint, others=[o for o in others if not lease_expired(o, now)], now=now,
        reopened="" if newer is None else "goal_changed", retried_at=now)


@transaction.atomic
def run_retry(*, run_id, user, reason: str = "", via: str = "web") -> Run:
    """On-call retry of an escalated run: the retry budget starts afresh and the run is decided again.
    ``via``: how the person acted: ``web`` (the pages and the API), ``slack``, ``email``."""
    workflow, run = workflow_and_run_lock(run_id)
    actor, role = _oncall(user, run, authorizers.may_retry)
    _applies_require("retry", run)
    workflow_active_require(workflow)
    now = timezone.now()
    others = holding_runs(workflow=workflow, intent=run.intent, lock=True, exclude=run.id)
    inp, context = retry_input(run, others=others, now=now)
    writer = RunWriter(run, actor, now)
    writer.emit(EventKind.RETRIED, run.current_stage, reason_code="oncall_retry",
                data={"role": role, "reason": reason, **({"via": via} if via else {})})
    run.retried_at = now
    escalation_close(run, status="approved", actor=actor, role=role, reason=reason or "retry", now=now, writer=writer)
    dead_leases_expire(workflow=workflow, intent=run.intent, now=now, runs=others)
    goal_latest_adopt(writer)  # the goal retry_input decided under (SPEC §10.1)
    decision_apply(writer, inp, context, from_state="escalated")
    writer.flush()
    return run


@transaction.atomic
def run_abandon(*, run_id, user, reason: str, via: str = "web") -> Run:
    run = run_lock(run_id)
    actor, role = _oncall(user, run, authorizers.may_abandon)
    if not (reason or "").strip():
        raise Invalid("reason_required", "Abandoning a run needs a reason.")
    _applies_require("abandon", run)
    now = timezone.now()
    writer = RunWriter(run, actor, now)
    writer.emit(EventKind.ABANDONED, run.current_stage, reason_code="oncall_abandon",
                data={"role": role, "reason": reason, **({"via": via} if via else {})})
    escalation_close(run, status="rejected", actor=actor, role=role, reason=reason, now=now, writer=writer)
    approvals_void(writer, Approval.objects.filter(run=run, status="pending"), reason="abandoned")
    writer.transition("abandoned", "oncall_abandon", cause="abandoned", reason=reason)
    writer.flush()
    return run


def compensation_plan(run: Run, held=None) -> dict | None:
    """Undo from the ledger: each effect that happened (or the ``held`` ones given, e.g. a rollback's
    isolated effects), by its recorded reference; None if not deterministic."""
    if held is None:
        held = selectors.effects_of_intent(run=run).filter(status__in=effects.HELD)
    held = sorted(held, key=lambda e: e.claimed_seq, reverse=True)
    if not held or any(not e.reference for e in held):
        return None
    undo = {"commit": "revert", "push": "revert_push", "deploy": "rollback", "publish": "unpublish"}
    steps = [f"{undo.get(e.operation, 'undo_' + (e.operation or e.stage))} {e.system}:{e.reference}" for e in held]
    last = held[0]
    return {
        "system": last.system or "stateboard",
        "operation": "compensate",
        "target": ",".join(e.reference for e in held),
        "summary": "; ".join(steps)[:500],
    }


@transaction.atomic
def run_compensate(*, run_id, user, reason: str = "") -> tuple[Run, Approval | None]:
    """On-call proposes the compensation for approval; escalates when it cannot be done deterministically."""
    _, run = workflow_and_run_lock(run_id)
    actor, role = _oncall(user, run, authorizers.may_compensate)
    _applies_require("compensate", run)
    holder = (Run.objects.filter(workflow_id=run.workflow_id, intent=run.intent, state__in=HOLDING_STATES, staged=False)
              .exclude(id=run.id).values_list("id", flat=True).first())
    if holder is not None:
        raise Conflict("active_run_exists", "Another run of this intent is active; compensate once it has finished.",
                       run=str(holder))
    open_requests = {request.status: request for request in Approval.objects.filter(
        run=run, kind=Approval.Kind.COMPENSATION, status__in=("pending", "approved"), consumed_at__isnull=True)}
    if run.state == "compensate" and "approved" in open_requests:  # decided, not yet performed: nothing to ask
        return run, open_requests["approved"]
    now = timezone.now()
    writer = RunWriter(run, actor, now)
    if run.state == "escalated":
        writer.transition("compensate", "oncall_compensate", cause="compensate", reason=reason)
    plan = compensation_plan(run)
    approval = None
    if plan is None:
        writer.transition("escalated", "compensation_not_deterministic", cause="compensate")
    else:
        pending = open_requests.get("pending")
        approval = pending or request_open(writer, kind=Approval.Kind.COMPENSATION, stage=run.current_stage,
                                           action=plan, requested_by=actor, user=user, data={"role": role})
        if pending is None:
            approval_notify(approval)  # editors, once per request
    escalation_close(run, status="approved", actor=actor, role=role, reason=reason or "compensate", now=now,
                     writer=writer)
    writer.flush()
    return run, approval


def _compensate(**kwargs) -> Run:
    return run_compensate(**kwargs)[0]


ACTIONS = {"retry": run_retry, "compensate": _compensate, "abandon": run_abandon}


def run_act(*, action: str, run_id, user, reason: str = "") -> Run:
    """On-call's ``action`` (a name of ``ACTIONS``) on one run: the pages name the action."""
    return ACTIONS[action](run_id=run_id, user=user, reason=reason)


def runs_act_in_bulk(*, action: str, run_ids: list, user, reason: str = "") -> tuple[list[Run], dict]:
    """On-call's ``action`` (``authorizers.may_act_in_bulk``) on each run on its own, each in its own
    transaction: the runs done, and {run id: refusal} of the others, each refusal audited under ``action``."""
    authorizers.may_act_in_bulk(user, action)
    done, refused = [], {}
    for run_id in run_ids:
        try:
            done.append(run_act(action=action, run_id=run_id, user=user, reason=reason))
        except DomainError as exc:
            refusal_audit(user=user, action=action, code=exc.code, run_id=run_id, reason=reason)
            refused[run_id] = exc
    return done, refused
