"""Rollback to a stage (SPEC §10.2) and the end of a compensation (either kind).

A rollback takes the results of ``to_stage`` and later out of the run's progress: their effects
become ``isolated`` (never claimed again), their stages' next attempts get the next generation's
keys, unconsumed permits of those stages are void and a server checkpoint records them pending.
With ``compensate`` the isolated effects are undone first (an approved compensation the agent
performs); then the same run is decided again: ``resume`` / ``rolled_back`` from ``to_stage``.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from ledger import authorizers, selectors
from ledger.domain import effects
from ledger.domain.machine import INTENT_HOLDING_STATES, ROLLBACK_STATES
from ledger.models import HOLDING_STATES, Approval, Effect, EventKind, LedgerEvent, Run
from ledger.services.checkpoints import server_checkpoint
from ledger.services.escalations import approvals_void, escalation_close, request_open
from ledger.services.goals import decide_again, goal_latest_adopt, goal_move
from ledger.services.oncall import compensation_plan
from ledger.services.runs import dead_leases_expire, workflow_active_require
from ledger.services.versions import generations_bump, goal_latest_version
from ledger.services.writer import RunWriter, workflow_and_run_lock
from stateboard.errors import Conflict, Invalid
from stateboard.roles import acting_role, actor_for

ROLLBACK_COMPENSATE = "rollback_compensate"  # reason code of the move into `compensate` by a rollback


def _rollback_role(user, run: Run) -> tuple[str, str]:
    authorizers.may_rollback(user, run)
    return actor_for(user), acting_role(user, set(authorizers.ROLLBACK_ROLES))


def rollback_effects(run: Run, to_stage: str) -> list[Effect]:
    """The effects a rollback to ``to_stage`` isolates: of the run's fingerprint, at ``to_stage`` or
    later, that happened (not failed, not already compensated or isolated)."""
    stages = run.workflow.stages
    later = stages[stages.index(to_stage):] if to_stage in stages else []
    _, sources = effects.effect_moves("rolled_back", run_state=run.state)
    return list(selectors.effects_of_intent(run=run).filter(stage__in=later, status__in=sources))


def _reopen(writer: RunWriter, *, cause: str, reason_code: str, others: list[Run]) -> None:
    """Back to restore and decided again, under the intent's latest goal (fresh / goal_changed when
    the run's goal is outdated, else resume / rolled_back)."""
    reopened = goal_latest_adopt(writer) or "rolled_back"
    writer.transition("restore", reason_code, cause=cause)
    decide_again(writer, reopened=reopened, others=others)


@transaction.atomic
def run_rollback(*, run_id, user, to_stage, reason: str = "", compensate: bool = False) -> Run:
    workflow, run = workflow_and_run_lock(run_id)
    actor, role = _rollback_role(user, run)
    if not isinstance(to_stage, str) or to_stage not in workflow.stages:
        raise Invalid("unknown_stage", f"to_stage {to_stage!r} is not a stage of workflow {workflow.slug!r}.")
    if not isinstance(compensate, bool):
        raise Invalid("validation_error", "compensate must be true or false.", field="compensate")
    if run.staged:
        raise Conflict("staged_run", "A staged run performed nothing; there is nothing to roll back.")
    if run.state not in ROLLBACK_STATES:
        raise Conflict("run_active", f"Only a finished or escalated run can be rolled back (this one is {run.state!r}).",
                       state=run.state)
    workflow_active_require(workflow)
    now = timezone.now()
    others = dead_leases_expire(workflow=workflow, intent=run.intent, now=now, exclude=run.id)
    holder = next((o for o in others if o.state in HOLDING_STATES), None)
    if holder is not None:
        raise Conflict("active_run_exists", "Another run holds this intent; roll back once it has finished.",
                       run=str(holder.id))
    latest = (Run.objects.filter(workflow=workflow, intent=run.intent, staged=False).exclude(state="noop")
              .order_by("-created_at", "-id").values_list("id", flat=True).first())
    if latest != run.id:
        raise Conflict("not_latest_run", "Roll back the intent's latest run.", run=str(latest))

    later = workflow.stages[workflow.stages.index(to_stage):]
    isolated = rollback_effects(run, to_stage)
    keys = [e.idempotency_key for e in isolated]
    writer = RunWriter(run, actor, now)
    event = writer.emit(EventKind.ROLLED_BACK, to_stage, reason_code="rolled_back",
                        data={"reason": reason, "isolated": keys, "compensate": compensate, "role": role})
    target, sources = effects.effect_moves("rolled_back", run_state=run.state)
    Effect.objects.filter(intent=run.intent, idempotency_key__in=keys, status__in=sources).update(
        status=target, last_seq=event.seq, updated_at=now)
    generations_bump(workflow_id=workflow.id, intent=run.intent, fingerprint=run.input_fingerprint,
                     stages=[s for s in later if s in workflow.effect_stages])
    # Permits (and open requests) for the rolled-back stages no longer cover anything.
    approvals_void(writer, Approval.objects.filter(run__workflow=workflow, run__intent=run.intent, stage__in=later,
                                                   kind=Approval.Kind.HIGH_IMPACT, consumed_at__isnull=True,
                                                   status__in=("approved", "pending")), reason="rolled_back")
    escalation_close(run, status="approved", actor=actor, role=role, reason=reason or "rollback", now=now,
                     writer=writer)
    run.stage_states = {**{s: e for s, e in run.stage_states.items() if s not in later},
                        **{s: {"status": "pending"} for s in later}}
    run.current_stage, run.retried_at = to_stage, now  # counts as an on-call retry
    run.ended_at, run.ended_reason = None, ""
    writer.rows.append(server_checkpoint(run, now=now))
    if compensate and isolated:
        writer.transition("compensate", ROLLBACK_COMPENSATE, cause="rolled_back", reason=reason)
        plan = compensation_plan(run, held=isolated)
        if plan is None:
            writer.transition("escalated", "compensation_not_deterministic", cause="compensate")
        else:
            request_open(writer, kind=Approval.Kind.COMPENSATION, stage=run.current_stage, action=plan,
                         requested_by=actor, user=user, data={"role": role})
        writer.flush()
    else:
        writer.flush()  # retried_at and the checkpoint must be visible to the decision
        writer = RunWriter(run, actor, now)
        _reopen(writer, cause="rolled_back", reason_code="rolled_back", others=others)
        writer.flush()
    return run


# ---------------------------------------------------------------- the end of a compensation

def compensation_scope(run: Run) -> tuple[list[str], bool]:
    """(the keys a compensation of this run undoes, whether it is a rollback's). A rollback's covers the
    effects it isolated; an on-call one every effect of the fingerprint that happened."""
    last_reason = (LedgerEvent.objects.of_run(run).filter(kind="transition").order_by("-seq")
                   .values_list("reason_code", flat=True).first())
    held = selectors.effects_of_intent(run=run)
    if last_reason == ROLLBACK_COMPENSATE:
        rolled = (LedgerEvent.objects.of_run(run).filter(kind="rolled_back").order_by("-seq")
                  .values_list("data", flat=True).first()) or {}
        isolated = held.filter(idempotency_key__in=rolled.get("isolated") or [], status="isolated")
        return sorted(isolated.values_list("idempotency_key", flat=True)), True
    return sorted(held.filter(status__in=effects.HELD).values_list("idempotency_key", flat=True)), False


def compensation_done(writer: RunWriter, event: LedgerEvent) -> None:
    """The approved compensation was performed and verified: its effects are compensated. A rollback's
    goes on to restore; an on-call one ends the run ``compensated`` (or, when the intent's goal
    changed meanwhile, decides it again under the new goal)."""
    run, data = writer.run, event.data or {}
    target, sources = effects.effect_moves("compensated", run_state=run.state)
    undone = Effect.objects.filter(intent=run.intent, idempotency_key__in=data.get("effects") or [], status__in=sources)
    stages = set(undone.values_list("stage", flat=True))
    undone.update(status=target, last_seq=event.seq, updated_at=event.at)
    if data.get("rollback"):
        others = list(Run.objects.select_related("workflow").filter(
            workflow_id=run.workflow_id, intent=run.intent, staged=False,
            state__in=INTENT_HOLDING_STATES).exclude(id=run.id))
        _reopen(writer, cause="compensated", reason_code="compensation_verified", others=others)
        return
    generations_bump(workflow_id=run.workflow_id, intent=run.intent, fingerprint=run.input_fingerprint, stages=stages)
    if run.goal_outdated:
        goal_move(writer, to_version=goal_latest_version(workflow_id=run.workflow_id, intent=run.intent))
    else:
        writer.transition("compensated", "compensation_verified", cause="compensated")


def rollback_preview(run: Run, to_stage: str) -> dict:
    """What a rollback to ``to_stage`` would do: the effects it isolates, and which of them a
    compensation could undo (those with a recorded reference)."""
    isolate = rollback_effects(run, to_stage)
    return {"to_stage": to_stage, "isolate": isolate,
            "compensable": [e for e in isolate if e.reference],
            "not_compensable": [e for e in isolate if not e.reference]}
