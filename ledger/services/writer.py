"""The lowest layer of the ledger's writes: fingerprints, locking a run, the run writer
(and the escalation request it opens for a run that escalates).

A run's events are written while its row is locked, which gives a gapless ``seq`` and a
consistent hash chain; a refused request raises before anything is flushed, so nothing
partial is ever written.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.core.exceptions import ValidationError as DjangoValidationError

from ledger.domain import machine, recovery
from ledger.domain.approval_rules import ESCALATION_APPROVERS
from ledger.domain.effects import effect_key_namespaced
from ledger.domain.projection import lease_next
from ledger.domain.usage import spend_day
from ledger.models import (
    LEASED_STATES,
    TERMINAL_STATES,
    Approval,
    Effect,
    EventKind,
    LedgerEvent,
    Run,
    RunKey,
    Workflow,
)
from ledger.services.chain import GENESIS_HASH, event_compute_hash
from ledger.services.notifications import approval_keys, approval_notify, notifications_settle
from ledger.store import store
from stateboard.canonical import digest
from stateboard.errors import Conflict, NotFound

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


def effect_key_given(run: Run, key: str | None) -> str:
    """An agent's ``idempotency_key`` on ``run`` as stored: itself when the run's workflow and intent hold it
    already (a key the ledger answered, or one stored before keys were namespaced: nothing runs twice),
    else namespaced by them, so it can never be another intent's."""
    if not key:
        return ""
    if Effect.objects.filter(workflow_id=run.workflow_id, intent=run.intent, idempotency_key=key).exists():
        return key
    return effect_key_namespaced(workflow_slug=run.workflow.slug, intent=run.intent, key=key)


# ---------------------------------------------------------------- the run writer

RUN_MUTABLE_FIELDS = ("state", "current_stage", "stage_states", "event_count", "last_hash", "lease_owner",
                      "lease_expires_at", "updated_at", "ended_at", "decision", "decided_at", "retried_at",
                      "lease_id", "queued_at", "queued_until", "ended_reason", "executor_state",
                      "input_fingerprint", "goal_version", "goal_outdated", "lease_holder_id", "attributes", "usage")
# The lease owner while the executor performs an effect stage (SPEC §5.2).
EXECUTOR = "system:executor"

@dataclass
class RunWriter:
    """Collects a locked run's new events and row changes; ``flush`` writes them at once."""

    run: Run
    actor: str
    now: datetime
    events: list[LedgerEvent] = field(default_factory=list)
    rows: list = field(default_factory=list)  # other rows written with the events (server checkpoints)
    before: dict = field(default_factory=dict)
    spend: list = field(default_factory=lambda: [0, 0, 0])  # the events' usage: input, output tokens, µ$ (SPEC §16)

    def __post_init__(self):
        self.before = {name: getattr(self.run, name) for name in RUN_MUTABLE_FIELDS}

    def emit(self, kind: str, stage: str = "", **fields) -> LedgerEvent:
        run = self.run
        fields.setdefault("actor", self.actor)
        event = LedgerEvent(**dict(
            run_id=run.id, intent=run.intent, seq=run.event_count + 1, at=self.now, stage=stage, kind=kind,
            input_fingerprint=run.input_fingerprint, policy_version=run.policy_version,
            env_fingerprint=run.env_fingerprint, prev_hash=run.last_hash or GENESIS_HASH, **fields,
        ))
        event.hash = event_compute_hash(event)
        run.event_count, run.last_hash = event.seq, event.hash
        self.events.append(event)
        return event

    def transition(self, to: str, reason_code: str = "", *, cause: str, actor: str | None = None,
                   **data) -> LedgerEvent:
        """Move the run along one edge of ``ledger.domain.machine.TRANSITIONS``; any other move is refused."""
        run = self.run
        if not machine.allowed(run.state, cause, to):
            raise Conflict("illegal_transition", f"The run cannot move from {run.state!r} to {to!r} ({cause}).",
                           state=run.state, current_stage=run.current_stage)
        event = self.emit(EventKind.TRANSITION, run.current_stage, reason_code=reason_code,
                          data={"from": run.state, "to": to, "cause": cause, **data}, actor=actor or self.actor)
        run.state = to
        if to in TERMINAL_STATES:
            run.ended_at, run.ended_reason = self.now, reason_code
        if to in machine.LEASE_ENDING_STATES:
            self.lease_clear()
        return event

    def lease_clear(self) -> None:
        run = self.run
        run.lease_owner, run.lease_holder_id, run.lease_id, run.lease_expires_at = "", None, None, None
        run.queued_at = run.queued_until = None
        run.executor_state = {}

    def lease_grant(self, owner: str) -> None:
        """Lease the run to ``owner`` (an agent) for the workflow's lease_seconds, under a new lease id."""
        run = self.run
        run.lease_owner, run.lease_holder_id, run.lease_id = owner, getattr(owner, "user_id", None), uuid.uuid4()
        run.lease_expires_at = self.now + timedelta(seconds=run.workflow.lease_seconds)
        run.queued_at = run.queued_until = None

    def queue(self) -> None:
        """Queue the run for an agent (SPEC §9.1): nobody holds it until an agent leases it in time."""
        run = self.run
        run.lease_owner, run.lease_holder_id, run.lease_id, run.lease_expires_at = "", None, None, None
        run.queued_at, run.queued_until = self.now, self.now + timedelta(seconds=run.workflow.lease_seconds)

    def executor_hold(self, *, stage: str, action: dict, **extra) -> None:
        """Hand the run to Stateboard's executor for ``stage`` (SPEC §5.2): it performs ``action``; the
        agent that held the run (and its lease id) is remembered, and its lease does not run out meanwhile."""
        run = self.run
        agent = next((who for who in (run.lease_owner, self.actor) if who.startswith("agent:")), "")
        run.executor_state = {
            "stage": stage, "action": action, "action_digest": digest(action), "agent": agent,
            "lease_id": str(run.lease_id) if run.lease_id else None, "attempts": 0, "since": self.now.isoformat(),
            **extra,
        }
        run.lease_owner, run.lease_expires_at = EXECUTOR, None
        run.queued_at = run.queued_until = None

    def hand_out(self) -> None:
        """A run decided fresh/resume/verify_only: leased at once to the agent that triggered it, else queued."""
        if self.actor.startswith("agent:"):
            self.lease_grant(self.actor)
        else:
            self.queue()

    def renew_lease(self) -> None:
        """Every event of the holder renews its lease, except while a human decides a pending request
        or the executor holds the run, and when the event queued the run (it was decided again by a
        goal change or a rollback's compensation, SPEC §10: an agent leases it anew)."""
        run = self.run
        waiting_for_human = run.state == "awaiting_approval" and run.lease_expires_at is None
        if run.state in TERMINAL_STATES or waiting_for_human or run.lease_owner == EXECUTOR \
                or run.queued_until is not None:
            return
        if not holds(run, self.actor):  # writing never grants a lease (SPEC §11.1)
            return
        if run.lease_id is None:
            run.lease_id = uuid.uuid4()
        run.lease_expires_at = self.now + timedelta(seconds=run.workflow.lease_seconds)

    def lease_record(self) -> None:
        """Every change of who holds the run is in the ledger (SPEC §11.2): when the lease the events
        imply (``projection.lease_next``) is not the run's, a ``leased`` (or ``released``) event says
        what it is now."""
        run, implied = self.run, _lease_of(self.before)
        for event in self.events:
            implied = lease_next(implied, event.kind, event.data)
        actual = _lease_of({name: getattr(run, name) for name in ("lease_owner", "lease_holder_id", "lease_id")})
        if actual == implied:
            return
        if actual[0]:
            expires = run.lease_expires_at.isoformat() if run.lease_expires_at else None
            self.emit(EventKind.LEASED, run.current_stage, data={
                "owner": actual[0], "holder": actual[1], "lease_id": actual[2], "expires_at": expires})
        else:
            self.emit(EventKind.RELEASED, run.current_stage, data={})

    def escalation_raise(self, why: str = "") -> Approval:
        """One open escalation per problem: the run's pending escalation request for on-call, else a new one
        with its ``escalation_raised`` event (by the system) on this writer. ``why``: the move's reason code
        when it is not the decision's (``budget_exceeded``)."""
        run, now = self.run, self.now
        existing = Approval.objects.filter(run=run, kind=Approval.Kind.ESCALATION, status="pending").first()
        if existing is not None:
            return existing
        reason = why or (run.decision or {}).get("reason_code", "")
        action = {"system": "stateboard", "operation": "resolve_escalation", "target": str(run.id),
                  "summary": f"Run escalated ({reason or 'needs on-call'}): retry, compensate or abandon."}
        approval = Approval.objects.create(
            kind=Approval.Kind.ESCALATION, run=run, stage=run.current_stage, action=action,
            action_digest=digest(action), policy_version=run.workflow.policy_version,
            input_fingerprint=run.input_fingerprint, requested_by="system", created_at=now,
            approvers=list(ESCALATION_APPROVERS), deadline=now + timedelta(seconds=run.workflow.approval_ttl_seconds))
        self.emit(EventKind.ESCALATION_RAISED, approval.stage, actor="system", reason_code=reason,
                  data={"approval": str(approval.id), "kind": approval.kind, "status": "pending", "action": action})
        approval_notify(approval)  # on-call, once per escalation request
        return approval

    def flush(self, *, insert: bool = False) -> None:
        """Write the collected events and row changes (``insert``: the run is new). A run they moved to
        ``escalated`` then gets its escalation request, written by a second flush."""
        escalates = self._escalates()
        why = next((e.reason_code for e in self.events if (e.data or {}).get("cause") == "budget_exceeded"), "") \
            if escalates else ""
        self.lease_record()
        self.run.updated_at = self.now
        if insert:
            store().run_insert(self.run, self.events, self.rows)
        else:
            store().run_write(self.run, self._changed(), self.events, self.rows, spend=self._spend())
        if self._queues(insert):
            store().queued_announce(self.run.workflow.slug)  # waiting leases wake at commit
        self._requests_settle()
        self._flushed()
        if escalates:
            self.escalation_raise(why)
            if self.events:
                self.flush()

    def flush_unless_changed(self, version: str) -> bool:
        """``flush`` as one statement, for a run read without its lock at row ``version``: written only when
        the row is still that version and nothing else is to be written with it (no waiting lease to wake,
        no request settled or opened). False: nothing was written (the caller takes the run's lock)."""
        self.lease_record()
        if self._queues(False) or self._escalates() or any(event.kind in SETTLING_KINDS for event in self.events):
            return False
        self.run.updated_at = self.now
        if not store().run_write(self.run, self._changed(), self.events, self.rows, unless_changed=version,
                                 spend=self._spend()):
            return False
        self._flushed()
        return True

    def _escalates(self) -> bool:
        """The collected events moved the run to ``escalated``, where it stays."""
        return self.run.state == "escalated" and any(
            event.kind == EventKind.TRANSITION and event.data["to"] == "escalated" for event in self.events)

    def _spend(self) -> tuple | None:
        """(workflow id, UTC day, input tokens, output tokens, µ$) the flush adds to the workflow's day."""
        return (self.run.workflow_id, spend_day(self.now), *self.spend) if any(self.spend) else None

    def _changed(self) -> list[str]:
        return [name for name in RUN_MUTABLE_FIELDS if getattr(self.run, name) != self.before[name]]

    def _queues(self, insert: bool) -> bool:
        return self.run.queued_until is not None and (insert or self.before["queued_until"] is None)

    def _flushed(self) -> None:
        self.rows, self.events, self.spend = [], [], [0, 0, 0]
        self.before = {name: getattr(self.run, name) for name in RUN_MUTABLE_FIELDS}

    def _requests_settle(self) -> None:
        """Every change of a request's status is one of these events: the notifications that asked
        people to decide it are done with it (read, saying what settled them)."""
        for event in self.events:
            approval_id = (event.data or {}).get("approval") if event.kind in SETTLING_KINDS else None
            if approval_id:
                notifications_settle(dedupe_keys=approval_keys(approval_id), done=_settled_words(event, self.events),
                                     now=self.now)


SETTLING_KINDS = frozenset({EventKind.APPROVED, EventKind.REJECTED, EventKind.EXPIRED, EventKind.ESCALATION_CLOSED,
                            EventKind.APPROVAL_VOIDED})


ON_CALL_ACTS = {EventKind.RETRIED: "retried", EventKind.ABANDONED: "abandoned", EventKind.ROLLED_BACK: "rolled back",
                EventKind.APPROVAL_REQUESTED: "compensation proposed"}


def _settled_words(event: LedgerEvent, batch: list[LedgerEvent]) -> str:
    """What settled a request, in words: "approved by user:ana", "retried by user:oli", "expired"."""
    data = event.data or {}
    if event.kind == EventKind.ESCALATION_CLOSED:
        act = next((ON_CALL_ACTS[e.kind] for e in batch if e.kind in ON_CALL_ACTS), "closed")
        return f"{act} by {event.actor}"
    if event.kind == EventKind.APPROVAL_VOIDED:
        return f"voided ({data.get('reason') or event.reason_code})"
    if event.kind == EventKind.EXPIRED:
        return "expired"
    return f"{event.kind} by {event.actor}"


def _lease_of(fields: dict) -> tuple:
    lease_id = fields["lease_id"]
    return fields["lease_owner"], fields["lease_holder_id"], str(lease_id) if lease_id else None


def workflow_spec(workflow: Workflow) -> recovery.WorkflowSpec:
    return recovery.WorkflowSpec(tuple(workflow.stages), frozenset(workflow.effect_stages), workflow.max_retries)


def run_spec(run: Run) -> recovery.WorkflowSpec:
    """The workflow as this run sees it: a staged run has no effect stages (it performs nothing, so a
    stage that would change the world is done once it succeeded, SPEC §10.3)."""
    spec = workflow_spec(run.workflow)
    return recovery.WorkflowSpec(spec.stages, frozenset(), spec.max_retries) if run.staged else spec


def stage_status(run: Run) -> dict[str, str]:
    return {stage: entry.get("status") for stage, entry in (run.stage_states or {}).items()}


def run_uuid_of(run_id) -> uuid.UUID:
    try:
        return run_id if isinstance(run_id, uuid.UUID) else uuid.UUID(str(run_id))
    except (ValueError, TypeError, AttributeError):
        raise NotFound("run_not_found", f"No run with id {run_id}.")


def run_lock(run_id, intent: str | None = None) -> Run:
    """Lock the run row and read it with its workflow (the ledger's hot path); ``intent``: the run's, when
    the caller already has it (it saves the read of the run's key)."""
    run = store().run_read(run_uuid_of(run_id), lock=True, intent=intent)
    if run is None:
        raise NotFound("run_not_found", f"No run with id {run_id}.")
    return run


def illegal(run: Run, detail: str):
    return Conflict("illegal_transition", detail, state=run.state, current_stage=run.current_stage)


def lease_lapse(run: Run, now: datetime) -> str | None:
    """``lease_expired`` (its holder went silent), ``not_leased`` (queued, no agent took it in time), or None."""
    if run.state not in LEASED_STATES:
        return None
    if run.queued_until is not None and run.queued_until <= now:
        return "not_leased"
    if run.lease_expires_at is not None and run.lease_expires_at <= now:
        return "lease_expired"
    return None


def lease_require(run: Run, actor: str) -> None:
    """A run-scoped write by ``actor`` is accepted only from the run's lease holder (SPEC §11.1): another
    agent (or the executor) holding it is 409 ``lease_held``; a queued run, or one nobody holds, 409
    ``not_leased``. Only agents and the executor hold leases: people and the system are not checked here
    (their writes have rules of their own)."""
    if actor == EXECUTOR or run.lease_owner == EXECUTOR:
        if actor != run.lease_owner:
            raise Conflict("lease_held", "The executor holds this run while it performs the stage.",
                           holder=run.lease_owner)
        return
    if not actor.startswith("agent:"):
        return
    if run.queued_until is not None:
        raise Conflict("not_leased", "This run is queued for an agent: lease it first (POST /api/v1/runs/lease/).")
    if not run.lease_owner:
        raise Conflict("not_leased", "Nobody holds this run's lease: lease it first (POST /api/v1/runs/lease/).")
    if not holds(run, actor):
        raise Conflict("lease_held", "Another agent holds this run's lease.", holder=run.lease_owner)


def holds(run: Run, actor: str) -> bool:
    """Whether ``actor`` holds the run's lease itself (the executor included)."""
    return _is_holder(run, run.lease_owner, actor)


def agent_holder(run: Run) -> str:
    """The agent holding ``run``: its lease owner, or the agent the executor holds it for ("" if none)."""
    if run.lease_owner == EXECUTOR:
        return (run.executor_state or {}).get("agent", "")
    return run.lease_owner if run.lease_owner.startswith("agent:") else ""


def held_by_agent(run: Run, actor: str) -> bool:
    """Whether ``actor`` is the agent holding ``run``, directly or through the executor."""
    return _is_holder(run, agent_holder(run), actor)


def _is_holder(run: Run, holder: str, actor: str) -> bool:
    """By identity when both are known (``Run.lease_holder``, ``Actor.user_id``), else by name (the
    executor, the system, a lease taken before identities were recorded)."""
    user_id = getattr(actor, "user_id", None)
    if run.lease_holder_id is not None and user_id is not None:
        return run.lease_holder_id == user_id
    return bool(holder) and holder == actor


def lease_expired(run: Run, now: datetime) -> bool:
    return lease_lapse(run, now) is not None


def lease_fail(writer: RunWriter) -> None:
    """Move a run whose lease lapsed to ``failed`` (a ``transition`` event by the system)."""
    run = writer.run
    reason = lease_lapse(run, writer.now)
    writer.transition("failed", reason, cause="lease_expired", lease_owner=run.lease_owner)


def intent_lock(workflow_id: int, intent: str) -> None:
    """Serialise this transaction with every other writer of the intent (triggers, on-call, approval
    decisions) and with nobody else. The lock order of every writer: the intent first, then run rows,
    never an intent lock while holding a run row."""
    store().intent_lock(workflow_id, intent)


def workflow_and_run_lock(run_id) -> tuple[Workflow, Run]:
    """Lock in the order every writer uses: the run's intent first (``intent_lock``), then the run."""
    try:
        found = RunKey.objects.filter(run_id=run_id).values_list("workflow_id", "intent").first()
    except (ValueError, TypeError, DjangoValidationError):
        found = None
    if found is None:
        raise NotFound("run_not_found", f"No run with id {run_id}.")
    intent_lock(*found)
    run = run_lock(run_id, intent=found[1])
    return run.workflow, run
