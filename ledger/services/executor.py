"""Stateboard's executor performs an effect stage itself (SPEC §5.2), as a sequence of committed steps.

An attempt claims the effect key with ``started`` (consuming the permit on an approval stage) and
commits *before* the handler is called; the outcome is recorded afterwards, then verified. Each
attempt has a deadline (the handler's timeout); a task that finds an attempt in flight within its
deadline leaves it alone, one past it verifies and never executes again unless verification proved
the effect absent. The bookkeeping lives in ``run.executor_state``: {stage, action, agent, lease_id,
attempts, since, current: {n, phase, deadline, done}}.

An approved compensation on an executor stage (API.md) is performed the same way, with the approved
plan as the action and ``compensation:<approval id>`` as the key: each attempt is committed to
``executor_state`` before the handler is called, an undo whose outcome was not observed is verified
(never repeated unless verification proved it absent), and once verified the executor posts
``compensated`` with the plan and the evidence. The state also holds {compensation, reference,
undo_absent}.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from ledger.domain.machine import EXECUTOR_STATES
from ledger.executor import Handler, HandlerConfigError, Outcome, handler_for
from ledger.models import Approval, Effect, Run
from ledger.services.approvals import high_impact_open, permit_find
from ledger.services.events import event_append
from ledger.services.outbox import EXECUTOR_TASK, outbox_put
from ledger.services.writer import EXECUTOR, RunWriter, run_lock
from stateboard.errors import Conflict


@dataclass
class _Pass:
    phase: str  # execute | verify
    attempt: int
    handler: Handler
    handler_name: str
    action: dict
    key: str
    reference: str
    context: dict
    compensation: bool = False


def _save_state(run: Run, state: dict) -> None:
    Run.objects.filter(id=run.id, intent=run.intent).update(executor_state=state)


def _escalate(run: Run, reason: str, now: datetime, **data) -> str:
    writer = RunWriter(run, EXECUTOR, now)
    writer.transition("escalated", reason, cause="executor", **data)
    writer.flush()
    return reason


def _held(run_id, stage) -> Run | None:
    run = run_lock(run_id)
    if run.lease_owner != EXECUTOR or (run.executor_state or {}).get("stage") != stage:
        return None
    return run


def _handler(run: Run, stage: str) -> tuple[str, Handler]:
    spec = (run.workflow.executors or {}).get(stage) or {}
    handler = handler_for(spec.get("handler", ""), spec.get("config") or {})
    missing = handler.missing_secrets()
    if missing:
        raise HandlerConfigError(f"environment variable {missing[0]} is not set")
    return spec["handler"], handler


def _effect_key(run: Run, stage: str) -> str:
    return (run.stage_states.get(stage) or {}).get("effect_key", "")


def _compensation_key(state: dict) -> str:
    return f"compensation:{state['compensation']}"


def _begin(run_id, stage: str, now: datetime) -> _Pass | str:
    """Decide this task's pass and commit its claim; a string says why there is nothing to do."""
    with transaction.atomic():
        run = _held(run_id, stage)
        if run is None:
            return "not_held"
        state = dict(run.executor_state)
        try:
            name, handler = _handler(run, stage)
        except HandlerConfigError as exc:
            return _escalate(run, "executor_misconfigured", now, detail=str(exc)[:200])
        current = state.get("current")
        if current and not current.get("done"):
            if now < parse_datetime(current["deadline"]):
                return "attempt_in_flight"
            if run.state == "execute":  # the attempt's worker died: its outcome was never observed
                event_append(run_id=run.id, actor=EXECUTOR, body={
                    "client_event_id": _event_id(state, stage, current["n"], "lost"), "stage": stage, "kind": "unknown",
                    "reason_code": "attempt_deadline_passed", "data": {"attempt": current["n"]}})
                run = run_lock(run.id, intent=run.intent)
        if state.get("attempts", 0) >= run.workflow.max_retries:
            return _escalate(run, "executor_unverifiable", now, attempts=state.get("attempts", 0))
        attempt = state.get("attempts", 0) + 1
        deadline = now + timedelta(seconds=handler.timeout_seconds)
        compensation = run.state == "compensate" and bool(state.get("compensation"))
        if run.state in ("verify", "verify_only") and run.current_stage == stage:
            phase = "verify"
        elif compensation:
            # an undo whose outcome was not observed is verified; sent again only once proved absent
            proved_absent = state.pop("undo_absent", False)
            phase = "execute" if not current or proved_absent else "verify"
        elif run.state in ("fresh", "resume", "checkpointed", "awaiting_approval"):
            phase = "execute"
            if stage in run.workflow.approval_stages and run.state != "awaiting_approval":
                try:  # executing again after `effect_absent`: only under a new permit
                    permit_find(run=run, stage=stage, kind=Approval.Kind.HIGH_IMPACT, action=state["action"], now=now)
                except Conflict:
                    writer = RunWriter(run, EXECUTOR, now)
                    high_impact_open(writer, stage=stage, action=state["action"], cause="approval_requested")
                    writer.flush()
                    return "approval_requested"
            event_append(run_id=run.id, actor=EXECUTOR, body={
                "client_event_id": _event_id(state, stage, attempt), "stage": stage, "kind": "started",
                "action": state["action"], "data": {"attempt": attempt, "deadline": deadline.isoformat()}})
            run = run_lock(run.id, intent=run.intent)
        else:
            return f"nothing_to_do_in_{run.state}"
        state.update(attempts=attempt, current={"n": attempt, "phase": phase, "deadline": deadline.isoformat(),
                                                 "done": False})
        _save_state(run, state)
        if compensation:
            key, reference = _compensation_key(state), state.get("reference", "")
        else:
            key = _effect_key(run, stage)
            reference = (Effect.objects.filter(intent=run.intent, idempotency_key=key)
                         .values_list("reference", flat=True).first() or "")
    return _Pass(phase, attempt, handler, name, state["action"], key, reference,
                 {"run": str(run.id), "workflow": run.workflow.slug, "intent": run.intent, "stage": stage},
                 compensation)


def _evidence(p: _Pass, stage: str, outcome: Outcome) -> list[dict]:
    item = {"uri": f"executor:{p.handler_name}/{stage}", "observed_at": outcome.observed_at.isoformat()}
    if outcome.body_digest:
        item.update(digest=outcome.body_digest, excerpt=outcome.excerpt)
    return [item]


def _current(run_id, stage, attempt) -> tuple[Run, dict] | None:
    """The locked run and its executor state if ``attempt`` is still the latest one in flight."""
    run = _held(run_id, stage)
    if run is None:
        return None
    state = dict(run.executor_state)
    current = state.get("current") or {}
    if current.get("n") != attempt or current.get("done"):
        return None  # an outcome from an attempt that is not the latest is refused
    return run, state


def _event_id(state: dict, stage: str, attempt: int, suffix: str = "") -> str:
    """The client_event_id of an executor event: unique per hand-over (a run rolled back may hand the same
    stage to the executor again), attempt and step, so a repeated task's event is recognised as its own."""
    hold = state.get("compensation") or state.get("proposal_seq", "")
    return f"executor:{stage}:{hold}:{attempt}" + (f":{suffix}" if suffix else "")


def _post(run: Run, state: dict, stage: str, attempt: int, kind: str, suffix: str, **fields) -> Run:
    event_append(run_id=run.id, actor=EXECUTOR, body={
        "client_event_id": _event_id(state, stage, attempt, suffix), "stage": stage, "kind": kind,
        "data": {"attempt": attempt, **fields.pop("data", {})}, **fields})
    return run_lock(run.id, intent=run.intent)


def _record_execute(run_id, stage: str, p: _Pass, outcome: Outcome) -> bool:
    """Record the handler's answer; True when the same attempt goes on to verify."""
    now = timezone.now()
    with transaction.atomic():
        found = _current(run_id, stage, p.attempt)
        if found is None:
            return False
        run, state = found
        data = {"detail": outcome.detail}
        if p.compensation:  # the ledger records the undo once verified (``compensated``)
            if outcome.status == "failed":
                _escalate(run, "compensation_failed", now, attempt=p.attempt, detail=outcome.detail[:200])
                return False
            state["reference"] = outcome.reference or state.get("reference", "")
        elif outcome.status == "succeeded":
            run = _post(run, state, stage, p.attempt, "succeeded", "outcome", data=data,
                        effect={"system": p.action["system"][:200], "operation": p.action["operation"][:200],
                                "reference": outcome.reference[:1000]}, evidence=_evidence(p, stage, outcome))
        elif outcome.status == "failed":
            _post(run, state, stage, p.attempt, "failed", "outcome", reason_code="executor_failed", data=data,
                  evidence=_evidence(p, stage, outcome))
            return False  # the run failed (the effect definitely did not happen); the writer cleared the hold
        else:
            run = _post(run, state, stage, p.attempt, "unknown", "outcome", reason_code="effect_unknown", data=data)
        deadline = timezone.now() + timedelta(seconds=p.handler.timeout_seconds)
        state.update(since=now.isoformat(), current={**state["current"], "phase": "verify",
                                                      "deadline": deadline.isoformat()})
        _save_state(run, state)
        p.reference = outcome.reference or p.reference
    return True


def _record_verify(run_id, stage: str, p: _Pass, outcome: Outcome) -> str:
    now = timezone.now()
    with transaction.atomic():
        found = _current(run_id, stage, p.attempt)
        if found is None:
            return "stale"
        run, state = found
        state.update(since=now.isoformat(), current={**state["current"], "done": True})
        if p.compensation and outcome.status == "verified":
            run = _post(run, state, stage, p.attempt, "compensated", "compensated", action=p.action,
                        evidence=_evidence(p, stage, outcome))
            _release(run, state, now)
            return "compensated"
        if p.compensation and outcome.status == "absent":
            state["undo_absent"] = True
        elif outcome.status == "verified":
            run = _post(run, state, stage, p.attempt, "verified", "verified", evidence=_evidence(p, stage, outcome),
                        effect={"system": p.action["system"][:200], "operation": p.action["operation"][:200],
                                "reference": (outcome.reference or p.reference)[:1000]})
            _release(run, state, now)
            return "verified"
        elif outcome.status == "absent":
            run = _post(run, state, stage, p.attempt, "failed", "absent", reason_code="effect_absent",
                        evidence=_evidence(p, stage, outcome))
        _save_state(run, state)
        if state["attempts"] >= run.workflow.max_retries:
            return _escalate(run, "executor_unverifiable", now, attempts=state["attempts"])
        outbox_put(task=EXECUTOR_TASK, args=[str(run.id), stage],
                   dedupe_key=f"executor:{run.id}:{stage}:after:{p.attempt}",
                   countdown=0 if outcome.status == "absent" else min(2 ** p.attempt, 60))
        return outcome.status


def _release(run: Run, state: dict, now: datetime) -> None:
    """The executor is done with the run. If it still holds it (the stage was verified and the run goes
    on) the run is the agent's again, under its lease, which restarts now; if the last event let go of it
    — the run finished, escalated, or was queued for any agent (a newer goal, SPEC §10.1; a rollback's
    compensation decided it again) — only the executor's bookkeeping is cleared."""
    writer = RunWriter(run, EXECUTOR, now)
    run.executor_state = {}
    if run.lease_owner == EXECUTOR:
        lease_id = state.get("lease_id")
        run.lease_owner, run.lease_id = state.get("agent", ""), uuid.UUID(lease_id) if lease_id else None
        run.lease_expires_at = now + timedelta(seconds=run.workflow.lease_seconds)
    writer.flush()  # (the writer records the lease going back to the agent)


def executor_run(*, run_id, stage: str) -> str:
    """One executor pass over ``stage`` of a run the executor holds; safe to repeat or redeliver."""
    p = _begin(run_id, stage, timezone.now())
    if isinstance(p, str):
        return p
    if p.phase == "execute":
        outcome = p.handler.execute(p.action, p.key, p.context)
        if not _record_execute(run_id, stage, p, outcome):
            return outcome.status
    return _record_verify(run_id, stage, p, p.handler.verify(p.action, p.key, p.reference))


def executor_sweep(*, now: datetime | None = None) -> int:
    """Every minute: re-enqueue attempts past their deadline (a killed worker's task is gone), and
    escalate runs on which no executor task finished within ``lease_seconds``."""
    now = now or timezone.now()
    acted = 0
    held = Run.objects.filter(lease_owner=EXECUTOR, state__in=EXECUTOR_STATES).select_related("workflow")
    for run in held[:1000]:
        state = run.executor_state or {}
        stage, current = state.get("stage"), state.get("current") or {}
        since = parse_datetime(state.get("since", "")) if state.get("since") else None
        if run.state != "awaiting_approval" and since and now > since + timedelta(seconds=run.workflow.lease_seconds):
            with transaction.atomic():
                locked = _held(run.id, stage)
                if locked is not None and locked.state != "awaiting_approval":
                    _escalate(locked, "executor_unverifiable", now, attempts=state.get("attempts", 0),
                              detail="no executor task finished within lease_seconds")
                    acted += 1
            continue
        if current and not current.get("done") and now >= parse_datetime(current["deadline"]):
            with transaction.atomic():
                acted += outbox_put(task=EXECUTOR_TASK, args=[str(run.id), stage],
                                    dedupe_key=f"executor:{run.id}:{stage}:sweep:{current['n']}:"
                                               f"{now.strftime('%Y%m%d%H%M')}")
    return acted
