"""The lowest layer of the ledger's writes: fingerprints, the hash chain, locking a run, the run writer.

A run's events are written while its row is locked, which gives a gapless ``seq`` and a
consistent hash chain; a refused request raises before anything is flushed, so nothing
partial is ever written.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

from django.core.exceptions import ValidationError as DjangoValidationError
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from ledger import machine, recovery, sql
from ledger.models import LEASED_STATES, TERMINAL_STATES, Checkpoint, EventKind, LedgerEvent, Run, Workflow
from stateboard.canonical import canonical_json, digest, sha256_hex
from stateboard.errors import Conflict, NotFound


GENESIS_HASH = "0" * 64

# ---------------------------------------------------------------- fingerprints and hashes

def input_fingerprint(*, workflow_slug: str, intent: str, inputs, policy_version: str,
                      goal_version: int | None = None) -> str:
    """SHA-256 of {workflow, intent, inputs, policy_version}, with goal_version when the run has one."""
    fields = {"workflow": workflow_slug, "intent": intent, "inputs": inputs, "policy_version": policy_version}
    if goal_version is not None:
        fields["goal_version"] = goal_version
    return digest(fields)


def effect_key_default(*, workflow_slug: str, intent: str, fingerprint: str, stage: str, generation: int = 0) -> str:
    """[workflow, intent, fingerprint, stage], with the stage's generation appended when it is >= 1."""
    return digest([workflow_slug, intent, fingerprint, stage, *([generation] if generation >= 1 else [])])


def _iso(value: datetime) -> str:
    return value.astimezone(dt_timezone.utc).isoformat(timespec="microseconds")


def event_hash_fields(event: LedgerEvent) -> dict:
    return {
        "run": str(event.run_id), "seq": event.seq, "at": _iso(event.at), "stage": event.stage,
        "kind": event.kind, "actor": event.actor, "input_fingerprint": event.input_fingerprint,
        "policy_version": event.policy_version, "env_fingerprint": event.env_fingerprint,
        "idempotency_key": event.idempotency_key, "effect": event.effect, "evidence": event.evidence,
        "reason_code": event.reason_code, "data": event.data, "client_event_id": event.client_event_id,
    }


def event_compute_hash(event: LedgerEvent) -> str:
    return sha256_hex(event.prev_hash.encode("ascii") + canonical_json(event_hash_fields(event)))


# ---------------------------------------------------------------- the run writer

RUN_MUTABLE_FIELDS = ("state", "current_stage", "stage_states", "event_count", "last_hash", "lease_owner",
                      "lease_expires_at", "updated_at", "ended_at", "decision", "decided_at", "retried_at",
                      "input_fingerprint", "goal_version", "goal_outdated")
@dataclass
class RunWriter:
    """Collects a locked run's new events and row changes; ``flush`` writes them at once."""

    run: Run
    actor: str
    now: datetime
    events: list[LedgerEvent] = field(default_factory=list)
    rows: list = field(default_factory=list)  # other rows written with the events (server checkpoints)
    before: dict = field(default_factory=dict)

    def __post_init__(self):
        self.before = {name: getattr(self.run, name) for name in RUN_MUTABLE_FIELDS}

    def emit(self, kind: str, stage: str = "", **fields) -> LedgerEvent:
        run = self.run
        fields.setdefault("actor", self.actor)
        event = LedgerEvent(
            run_id=run.id, seq=run.event_count + 1, at=self.now, stage=stage, kind=kind,
            input_fingerprint=run.input_fingerprint, policy_version=run.policy_version,
            env_fingerprint=run.env_fingerprint, prev_hash=run.last_hash or GENESIS_HASH, **fields,
        )
        event.hash = event_compute_hash(event)
        run.event_count, run.last_hash = event.seq, event.hash
        self.events.append(event)
        return event

    def transition(self, to: str, reason_code: str = "", *, cause: str, actor: str | None = None,
                   **data) -> LedgerEvent:
        """Move the run along one edge of ``ledger.machine.TRANSITIONS``; any other move is refused."""
        run = self.run
        if not machine.allowed(run.state, cause, to):
            raise Conflict("illegal_transition", f"The run cannot move from {run.state!r} to {to!r} ({cause}).",
                           state=run.state, current_stage=run.current_stage)
        event = self.emit(EventKind.TRANSITION, run.current_stage, reason_code=reason_code,
                          data={"from": run.state, "to": to, **data}, actor=actor or self.actor)
        run.state = to
        if to in TERMINAL_STATES:
            run.ended_at = self.now
            run.lease_expires_at = None
        return event

    def renew_lease(self) -> None:
        """Every agent event renews the lease, except while a human decides a pending request."""
        waiting_for_human = self.run.state == "awaiting_approval" and self.run.lease_expires_at is None
        if self.run.state not in TERMINAL_STATES and not waiting_for_human:
            self.run.lease_owner = self.actor
            self.run.lease_expires_at = self.now + timedelta(seconds=self.run.workflow.lease_seconds)

    def flush(self, *, insert: bool = False) -> None:
        self.run.updated_at = self.now
        if insert:
            self.run.save(force_insert=True)
        if insert:
            sql.rows_insert(LedgerEvent, self.events)
            sql.rows_insert(Checkpoint, self.rows)
        else:
            changed = [name for name in RUN_MUTABLE_FIELDS if getattr(self.run, name) != self.before[name]]
            sql.events_and_run_write(self.events, self.run, changed, checkpoints=self.rows)
        self.rows = []
        self.events, self.before = [], {name: getattr(self.run, name) for name in RUN_MUTABLE_FIELDS}


def workflow_spec(workflow: Workflow) -> recovery.WorkflowSpec:
    return recovery.WorkflowSpec(tuple(workflow.stages), frozenset(workflow.effect_stages), workflow.max_retries)


def run_spec(run: Run) -> recovery.WorkflowSpec:
    """The workflow as this run sees it: a staged run has no effect stages (it performs nothing, so a
    stage that would change the world is done once it succeeded, SPEC §10.3)."""
    spec = workflow_spec(run.workflow)
    return recovery.WorkflowSpec(spec.stages, frozenset(), spec.max_retries) if run.staged else spec


def stage_status(run: Run) -> dict[str, str]:
    return {stage: entry.get("status") for stage, entry in (run.stage_states or {}).items()}


def run_lock(run_id, *, client_event_id: str | None = None) -> Run:
    """Lock the run row and read it with its workflow, in one statement (the ledger's hot path).

    The same statement looks up an earlier event with ``client_event_id`` (``run.original_event_id``).
    Under READ COMMITTED its subqueries read the snapshot taken before the lock wait, so when another
    writer appended meanwhile (the last seq seen is not the locked row's ``event_count``) the lookup
    is repeated.
    """
    try:
        run_uuid = run_id if isinstance(run_id, uuid.UUID) else uuid.UUID(str(run_id))
    except (ValueError, TypeError, AttributeError):
        raise NotFound("run_not_found", f"No run with id {run_id}.")
    found = sql.run_lock_read(run_uuid, client_event_id)
    if found is None:
        raise NotFound("run_not_found", f"No run with id {run_id}.")
    run, original_event_id, snapshot_last_seq = found
    run.original_event_id = original_event_id
    if client_event_id is not None and (snapshot_last_seq or 0) != run.event_count:
        run.original_event_id = (LedgerEvent.objects.filter(run=run, client_event_id=client_event_id)
                                 .values_list("id", flat=True).first())
    return run


def parse_moment(value) -> datetime | None:
    """An aware ISO 8601 date-time, or None (also for well-formed but impossible dates like Feb 30)."""
    if not isinstance(value, str):
        return None
    try:
        moment = parse_datetime(value)
    except ValueError:
        return None
    return moment if moment is not None and not timezone.is_naive(moment) else None


def illegal(run: Run, detail: str):
    return Conflict("illegal_transition", detail, state=run.state, current_stage=run.current_stage)


def run_read(run_id) -> Run:
    """The run with its workflow, without a lock."""
    try:
        run_uuid = run_id if isinstance(run_id, uuid.UUID) else uuid.UUID(str(run_id))
    except (ValueError, TypeError, AttributeError):
        raise NotFound("run_not_found", f"No run with id {run_id}.")
    found = sql.run_lock_read(run_uuid, None, lock=False)
    if found is None:
        raise NotFound("run_not_found", f"No run with id {run_id}.")
    return found[0]


def lease_expired(run: Run, now: datetime) -> bool:
    return run.state in LEASED_STATES and run.lease_expires_at is not None and run.lease_expires_at <= now


def workflow_and_run_lock(run_id) -> tuple[Workflow, Run]:
    """Lock in the order every writer uses: the workflow row first, then the run."""
    try:
        workflow_id = Run.objects.filter(id=run_id).values_list("workflow_id", flat=True).first()
    except (ValueError, TypeError, DjangoValidationError):
        workflow_id = None
    if workflow_id is None:
        raise NotFound("run_not_found", f"No run with id {run_id}.")
    workflow = Workflow.objects.select_for_update().get(id=workflow_id)
    return workflow, run_lock(run_id)


# ---------------------------------------------------------------- hash chain

def chain_verify(*, run: Run) -> dict:
    """Recompute the run's hash chain: ``{ok, events, first_bad_seq}`` (a gap counts as tampering)."""
    prev, expected_seq, first_bad, count = GENESIS_HASH, 1, None, 0
    for event in LedgerEvent.objects.filter(run=run).order_by("seq").iterator(chunk_size=2000):
        count += 1
        if first_bad is None:
            if event.seq != expected_seq:
                first_bad = expected_seq
            elif event.prev_hash != prev or event_compute_hash(event) != event.hash:
                first_bad = event.seq
        prev, expected_seq = event.hash, event.seq + 1
    return {"ok": first_bad is None, "events": count, "first_bad_seq": first_bad}

