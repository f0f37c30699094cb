"""Agents' events in batches: ``events_append`` (one transaction, the run locked once, all or nothing).

Each event is applied by ``events._event_apply``, the one home of the per-event rules that
``event_append`` uses too.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from ledger.models import LedgerEvent, Run
from ledger.services.bodies import client_event_id_check
from ledger.services.events import _citations_record, _event_apply
from ledger.services.spend import budget_escalate
from ledger.services.writer import RunWriter, run_lock
from stateboard.canonical import digest
from stateboard.errors import Conflict, DomainError, Invalid

BATCH_MAX = 100


def _indexed(exc: DomainError, index: int) -> DomainError:
    exc.extra["index"] = index
    return exc


def events_append(*, run_id, bodies, actor: str, intent: str | None = None) -> tuple[list[LedgerEvent], bool]:
    """Append a batch of agent events in order, in one transaction with the run locked once: all or
    nothing. Returns (events, created); a batch recorded before returns its events (created False).

    Each event is checked as ``event_append`` checks it; the first refusal refuses the batch with its
    ``index`` and nothing is written — except the move to ``failed`` of an expired lease, committed as
    for a single event. A ``started`` on an effect stage may only be the last item (``claim_not_last``):
    the claim must commit before the agent performs the effect."""
    if not isinstance(bodies, list) or not bodies:
        raise Invalid("validation_error", "A batch is a non-empty JSON array of event objects.")
    if len(bodies) > BATCH_MAX:
        raise Invalid("batch_too_large", f"A batch holds at most {BATCH_MAX} events (this one has {len(bodies)}).",
                      limit=BATCH_MAX)
    seen = set()
    for index, body in enumerate(bodies):
        if not isinstance(body, dict):
            raise Invalid("validation_error", "Each event of a batch must be a JSON object.", index=index)
        client_event_id = body.get("client_event_id")
        if client_event_id is None:
            raise Invalid("validation_error", "Each event of a batch needs its client_event_id.", index=index)
        try:
            client_event_id_check(client_event_id)
        except Invalid as exc:
            raise _indexed(exc, index)
        if client_event_id in seen:
            raise Invalid("validation_error", "Two events of the batch share a client_event_id.", index=index)
        seen.add(client_event_id)
    with transaction.atomic():
        result = _events_append(run_id=run_id, bodies=bodies, actor=actor, intent=intent)
    if isinstance(result, DomainError):
        raise result
    return result


def _batch_recorded(run: Run, bodies: list[dict], digests: list[str]) -> list[LedgerEvent] | None:
    """The batch's events if all of it was recorded before, None if none of it; 409 if only part of it
    (or one with another body), with the index where it differs."""
    found = {e.client_event_id: e for e in LedgerEvent.objects.of_run(run).filter(
        client_event_id__in=[body["client_event_id"] for body in bodies])}
    if not found:
        return None
    first_recorded = bodies[0]["client_event_id"] in found
    for index, (body, body_digest) in enumerate(zip(bodies, digests)):
        original = found.get(body["client_event_id"])
        if original is not None and original.body_digest != body_digest:
            raise Conflict("client_event_id_mismatch", "This client_event_id was used with a different body.",
                           seq=original.seq, index=index)
        if (original is not None) != first_recorded:
            raise Conflict("client_event_id_mismatch", "Only part of this batch was recorded before; "
                                                       "send the events that were not recorded on their own.",
                           index=index)
    return [found[body["client_event_id"]] for body in bodies]


def _events_append(*, run_id, bodies: list[dict], actor: str, intent: str | None):
    run = run_lock(run_id, intent=intent)
    digests = [digest(body) for body in bodies]
    recorded = _batch_recorded(run, bodies, digests)
    if recorded is not None:
        return recorded, False
    for index, body in enumerate(bodies[:-1]):
        if body.get("kind") == "started" and body.get("stage") in run.workflow.effect_stages:
            raise Invalid("claim_not_last", "A 'started' on an effect stage must be the batch's last event: "
                                            "the claim commits before the effect is performed.", index=index)
    writer = RunWriter(run, actor, timezone.now())
    events = []
    for index, (body, body_digest) in enumerate(zip(bodies, digests)):
        try:
            event = _event_apply(writer, body, body_digest=body_digest)
        except DomainError as exc:
            raise _indexed(exc, index)
        if isinstance(event, Conflict):  # the lease expired: its move to failed commits, the batch does not
            return _indexed(event, index)
        events.append(event)
    budget_escalate(writer)  # (SPEC §16: the batch is recorded whole, and the run escalates after it if it crossed)
    writer.flush()
    _citations_record(writer, events)
    return events, True
