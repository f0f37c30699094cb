"""Goal versions (SPEC §10.1): a new version of an intent's goal, and moving its runs onto it.

A run works under one goal version (part of its fingerprint, so effect keys and checkpoints of an
older goal are never taken for the new one). A new version moves every holding run that is between
stages and owes the world nothing back to ``restore`` at once; a run that still owes something is
marked ``goal_outdated`` and moved by ``goal_catch_up`` as soon as it owes nothing.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from ledger import authorizers, selectors
from ledger.domain import effects
from ledger.domain.machine import GOAL_CHANGE_STATES, OWING_STATES
from ledger.models import HOLDING_STATES, Approval, EventKind, Goal, Run, Workflow
from ledger.services.escalations import approvals_void
from ledger.services.runs import dead_leases_expire, decision_apply, recovery_input_gather
from ledger.services.versions import goal_latest_version
from ledger.services.writer import RunWriter, agent_holder, held_by_agent, input_fingerprint, intent_lock
from stateboard.errors import Conflict, Invalid
from stateboard.roles import actor_for

GOAL_CHANGES = ("amend", "replace")
TEXT_MAX, ITEM_MAX, ITEMS_MAX = 10_000, 1_000, 200


def _text_list(value, name: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > ITEMS_MAX or not all(
            isinstance(item, str) and len(item) <= ITEM_MAX for item in value):
        raise Invalid("validation_error", f"{name} must be a list of at most {ITEMS_MAX} strings "
                                          f"of at most {ITEM_MAX} characters.", field=name)
    return list(value)


def owes_the_world(run: Run) -> bool:
    """In execute/verify/verify_only/compensate, or an effect of its fingerprint not yet verified."""
    if run.state in OWING_STATES:
        return True
    return selectors.effects_of_intent(run=run).filter(status__in=effects.UNVERIFIED).exists()


def goal_fingerprint(run: Run, version: int | None) -> str:
    """The run's input fingerprint under goal ``version``."""
    return input_fingerprint(workflow_slug=run.workflow.slug, intent=run.intent, inputs=run.inputs,
                             policy_version=run.policy_version, goal_version=version)


def goal_newer(run: Run) -> int | None:
    """The intent's latest goal version when it is newer than the run's, else None."""
    latest = goal_latest_version(workflow_id=run.workflow_id, intent=run.intent)
    return None if latest == run.goal_version else latest


def goal_adopt(writer: RunWriter, version: int | None) -> None:
    """The run works under ``version`` from now on: new fingerprint; its pending requests are void
    (the inputs they were asked for changed), each with its ``approval_voided`` event."""
    run = writer.run
    approvals_void(writer, Approval.objects.filter(run=run, status="pending").exclude(kind=Approval.Kind.ESCALATION),
                   reason="goal_changed")
    run.goal_version, run.goal_outdated = version, False
    run.input_fingerprint = goal_fingerprint(run, version)


def goal_latest_adopt(writer: RunWriter) -> str:
    """Before on-call decides a run again (a retry, a rollback): when the intent's goal is newer than
    the run's, a ``goal_changed`` event and the run adopts it; answers ``"goal_changed"`` then, else ""."""
    run = writer.run
    latest = goal_newer(run)
    if latest is None:
        return ""
    writer.emit(EventKind.GOAL_CHANGED, run.current_stage, data={"from": run.goal_version, "to": latest})
    goal_adopt(writer, latest)
    return "goal_changed"


def decide_again(writer: RunWriter, *, reopened: str, others: list[Run]) -> None:
    """Decide a run that is in ``restore`` again (a goal change or a rollback), under its current goal;
    a run to work on is queued for an agent (whoever held it before holds it no more)."""
    run = writer.run
    inp, context = recovery_input_gather(workflow=run.workflow, intent=run.intent, fingerprint=run.input_fingerprint,
                                         policy_version=run.policy_version, env_fingerprint=run.env_fingerprint,
                                         others=others, now=writer.now, reopened=reopened)
    decision_apply(writer, inp, context, from_state="restore", queued=True)


def goal_move(writer: RunWriter, *, to_version: int) -> None:
    """goal_changed {from, to}, back to restore, decided again: fresh / goal_changed.

    Another real run cannot hold the intent meanwhile (this one holds it), so the decision needs no
    other run's lock; that keeps the lock order of the event path (this run only)."""
    run = writer.run
    writer.emit(EventKind.GOAL_CHANGED, run.current_stage, data={"from": run.goal_version, "to": to_version})
    writer.transition("restore", "goal_changed", cause="goal_changed")
    writer.lease_clear()  # its agent (or the executor, before it started) holds it no more
    goal_adopt(writer, to_version)
    decide_again(writer, reopened="goal_changed", others=[])


def goal_catch_up(writer: RunWriter) -> None:
    """The hook after an event: a run that kept an outdated goal while it owed the world something
    is moved to the latest goal (and queued) once it is between stages and owes nothing."""
    run = writer.run
    if not run.goal_outdated or run.state not in GOAL_CHANGE_STATES or owes_the_world(run):
        return
    goal_move(writer, to_version=goal_latest_version(workflow_id=run.workflow_id, intent=run.intent))


@transaction.atomic
def goal_create(*, workflow_slug: str, intent, objective=None, constraints=None, acceptance=None,
                change="amend", user) -> tuple[Goal, dict]:
    """A new goal version for an intent; answers (goal, {"moved": [run ids], "deferred": [run ids]})."""
    authorizers.may_post_goal(user)
    if not isinstance(intent, str) or not intent.strip() or len(intent) > 500:
        raise Invalid("validation_error", "intent must be a non-empty string of at most 500 characters.", field="intent")
    if change not in GOAL_CHANGES:
        raise Invalid("validation_error", "change must be 'amend' or 'replace'.", field="change")
    if objective is not None and (not isinstance(objective, str) or len(objective) > TEXT_MAX):
        raise Invalid("validation_error", f"objective must be a string of at most {TEXT_MAX} characters.",
                      field="objective")
    constraints, acceptance = _text_list(constraints, "constraints"), _text_list(acceptance, "acceptance")
    workflow = Workflow.objects.filter(slug=workflow_slug).first()
    if workflow is None:
        raise Invalid("unknown_workflow", f"No workflow with slug {workflow_slug!r}.")
    intent_lock(workflow.id, intent)  # serialises with the intent's triggers, on-call actions and other goals
    now, actor = timezone.now(), actor_for(user)
    alive = dead_leases_expire(workflow=workflow, intent=intent, now=now)
    if actor.startswith("agent:"):
        _goal_lease_check(alive, actor)
    previous = Goal.objects.filter(workflow=workflow, intent=intent).order_by("-version").first()
    if change == "amend" and previous is not None:
        objective = previous.objective if objective is None else objective
        constraints = previous.constraints + constraints
        acceptance = previous.acceptance + acceptance
    goal = Goal.objects.create(workflow=workflow, intent=intent, version=(previous.version + 1) if previous else 1,
                               objective=objective or "", constraints=constraints, acceptance=acceptance,
                               change=change, created_by=actor, created_at=now)
    moved, deferred = [], []
    for run in alive:
        if run.state not in HOLDING_STATES:
            continue
        writer = RunWriter(run, actor, now)
        if run.state in GOAL_CHANGE_STATES and not owes_the_world(run):
            held_by_poster = held_by_agent(run, actor)
            goal_move(writer, to_version=goal.version)
            if held_by_poster and run.queued_until is not None:  # it stays the poster's, under a new lease id
                writer.lease_grant(actor)
            moved.append(str(run.id))
        else:
            run.goal_outdated = True  # moved by goal_catch_up once its effects are settled
            deferred.append(str(run.id))
        writer.flush()
    return goal, {"moved": moved, "deferred": deferred}


def _goal_lease_check(runs: list[Run], actor: str) -> None:
    """An agent's goal post is refused while a real run of the intent is held by another agent (SPEC §11.1)."""
    for run in runs:
        if agent_holder(run) and not held_by_agent(run, actor) and not run.staged:
            raise Conflict("lease_held", "Another agent holds a run of this intent; it alone may change its goal.",
                           holder=agent_holder(run), run=str(run.id))


def goals_of(*, workflow: Workflow, intent: str | None = None):
    """The goal versions of a workflow (of one intent), newest first."""
    goals = Goal.objects.filter(workflow=workflow)
    return goals.filter(intent=intent).order_by("-version") if intent else goals.order_by("-created_at", "-id")
