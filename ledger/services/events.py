"""Agents' events: ``event_append`` (the lease, the body's checks, the kind's handler from ``event_kinds``,
the one-statement write against the run as read), and the citations of flushed events."""

from __future__ import annotations

from django.db import transaction
from django.db.transaction import TransactionManagementError
from django.utils import timezone

from knowledge import services as knowledge_services
from ledger.models import TERMINAL_STATES, LedgerEvent, Run
from ledger.services.bodies import client_event_id_check, validate_effect, validate_event_body, validate_evidence
from ledger.services.event_kinds import HANDLERS, PREPARE, Append, event_effect_key
from ledger.services.goals import goal_catch_up
from ledger.services.spend import budget_escalate, usage_record, usage_valid
from ledger.services.writer import (
    EXECUTOR,
    RunWriter,
    holds,
    illegal,
    lease_fail,
    lease_lapse,
    lease_require,
    run_uuid_of,
)
from ledger.store import StatementRefused, statements_refused, store
from stateboard.canonical import digest
from stateboard.errors import Conflict, DomainError, Invalid, NotFound

# ---------------------------------------------------------------- events

def event_append(*, run_id, body: dict, actor: str, intent: str | None = None,
                 run: Run | None = None) -> tuple[LedgerEvent, bool]:
    """Append an agent's event; returns (event, created). A retried client_event_id returns the original.
    ``intent``: the run's, when the caller read its key already (it saves the store that read); ``run``:
    the run as this request read it without its lock (the pipeline's read).

    Checks run in this order: a repeated client_event_id, then the lease, then the goal (SPEC §10.1),
    then the transition. An event from the holder after its lease ran out is refused with 409
    ``lease_expired`` *after* the run's move to ``failed`` has committed — the one write a refused
    request makes."""
    appended = _event_append_as_read(run_id=run_id, body=body, actor=actor, run=run)
    if appended is not None:
        return appended, True
    with transaction.atomic():
        result = _event_append(run_id=run_id, body=body, actor=actor, intent=intent or (run and run.intent))
    if isinstance(result, Conflict):
        raise result
    return result


def _event_append_as_read(*, run_id, body: dict, actor: str, run: Run | None) -> LedgerEvent | None:
    """The common append in one statement, without the run's lock: applied to the run as read (``run``, else
    read here) and written on condition that its row is still the version read. Only when applying it
    needs no other statement (``statements_refused``) and is not refused; None otherwise — nothing was
    written, and the append takes the run's lock (which also answers a repeated ``client_event_id``)."""
    if not store().writes_unless_changed:
        return None
    run = run or store().run_peek(run_uuid_of(run_id))
    if run is None:
        return None
    writer = RunWriter(run, actor, timezone.now())
    try:
        with statements_refused():
            client_event_id_check(body.get("client_event_id"))
            event = _event_apply(writer, body, body_digest=digest(body))
            budget_escalate(writer)
    except (DomainError, StatementRefused, TransactionManagementError):  # (a locking read refused outside one)
        return None
    if isinstance(event, Conflict) or _claim_uris(event) or not writer.flush_unless_changed(run.row_version):
        return None
    return event


def _lease_check(run: Run, body: dict, actor: str, now, *, pending: bool = False) -> Conflict | None:
    """Only the lease holder appends (SPEC §11.1); returns the refusal to raise once the expiry is written.
    ``pending``: earlier events of a batch are not flushed yet (the expiry is then refused without a write;
    it cannot happen, since the batch's first event renewed the lease at the same ``now``)."""
    if run.state in TERMINAL_STATES:
        return None
    lease_require(run, actor)
    lease_id = body.get("lease_id")
    if lease_id is not None and str(lease_id) != str(run.lease_id or ""):
        raise Conflict("lease_held", "This event carries a lease that is not the run's current one.")
    if holds(run, actor) and lease_lapse(run, now) == "lease_expired":
        refusal = Conflict("lease_expired", "Your lease on this run expired; the run has been moved to failed.")
        if pending:
            raise refusal
        writer = RunWriter(run, "system", now)
        lease_fail(writer)
        writer.flush()
        refusal.extra["state"] = run.state
        return refusal
    return None


def _event_append(*, run_id, body: dict, actor: str, intent: str | None):
    client_event_id = body.get("client_event_id")
    client_event_id_check(client_event_id)
    run, original = store().run_lock_for_event(run_uuid_of(run_id), client_event_id, intent=intent)
    if run is None:
        raise NotFound("run_not_found", f"No run with id {run_id}.")
    body_digest = digest(body)
    if original is not None:
        if original.body_digest == body_digest:
            return original, False
        raise Conflict("client_event_id_mismatch", "This client_event_id was used with a different body.",
                       seq=original.seq)
    writer = RunWriter(run, actor, timezone.now())
    event = _event_apply(writer, body, body_digest=body_digest)
    if isinstance(event, Conflict):
        return event
    budget_escalate(writer)
    writer.flush()
    _citations_record(writer, [event])
    return event, True


def _event_apply(writer: RunWriter, body: dict, *, body_digest: str) -> LedgerEvent | Conflict:
    """Apply one agent event to the writer's locked run (its client_event_id already known to be new):
    the lease, the body, the kind's handler, its usage added up. Unflushed; a refusal raises (or, for an expired
    lease whose move to failed was written, is returned). The per-run budget is the caller's to check
    (``spend.budget_escalate``): after the event, or after a whole batch."""
    run, actor, now = writer.run, writer.actor, writer.now
    refusal = _lease_check(run, body, actor, now, pending=bool(writer.events))
    if refusal is not None:
        return refusal
    kind, stage = validate_event_body(run, body)
    usage = usage_valid(body.get("usage"))
    if body.get("effect") is not None and stage not in run.workflow.effect_stages:
        raise Invalid("effect_not_expected", f"{stage!r} is not an effect stage: an event there carries no effect.")
    if kind == "started" and (run.goal_outdated or body.get("goal_version", run.goal_version) != run.goal_version):
        raise Conflict("goal_superseded", "The intent's goal changed: this run may start no stage under the old one.",
                       goal_version=run.goal_version)
    if run.state in TERMINAL_STATES and kind != "corrected":
        raise illegal(run, f"The run is {run.state!r}; it accepts no more stage events.")
    if stage in (run.workflow.executors or {}) and actor != EXECUTOR and kind not in ("proposed", "skipped",
                                                                                       "corrected", "attributes_set"):
        raise Conflict("executor_stage", f"Stateboard's executor performs {stage!r}: post 'proposed' with the "
                                         "action (or 'skipped'); the executor posts the rest.")
    app = Append(writer, body, stage, kind)
    recorded = PREPARE[kind](app) if kind in PREPARE else {}  # e.g. the approval a start spends
    event = writer.emit(
        kind, stage, reason_code=body.get("reason_code") or "", data={**(body.get("data") or {}), **recorded},
        effect=validate_effect(body.get("effect")), evidence=validate_evidence(body.get("evidence")),
        client_event_id=body.get("client_event_id"), body_digest=body_digest,
        idempotency_key=event_effect_key(run, kind, stage, app.given_key), usage=usage,
    )
    usage_record(writer, usage)
    HANDLERS[kind](app, event)
    goal_catch_up(writer)  # a run that kept an outdated goal moves once its effects are settled
    writer.renew_lease()
    return event


def _citations_record(writer: RunWriter, events: list[LedgerEvent]) -> None:
    """The ``claim:`` evidence of flushed events, recorded as citations."""
    for event in events:
        claim_uris = _claim_uris(event)
        if claim_uris:
            knowledge_services.claim_citations_record(event_id=event.id, run_id=writer.run.id, actor=writer.actor,
                                                      at=writer.now, uris=claim_uris)


def _claim_uris(event: LedgerEvent) -> list[str]:
    return [e["uri"] for e in event.evidence if e.get("uri", "").startswith("claim:")]

