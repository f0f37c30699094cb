"""Every write to the ledger: triggers, events, effects, checkpoints, approvals.

Each service is one transaction. A run's events are written while its row is locked
(``select_for_update``), which gives a gapless ``seq`` and a consistent hash chain; a
refused request raises before anything is flushed, so nothing partial is ever written.
"""

from __future__ import annotations

import functools
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from ledger import machine, recovery, sql
from ledger.models import (
    HOLDING_STATES,
    LEASED_STATES,
    STAGE_OUTCOME_KINDS,
    TERMINAL_STATES,
    UNVERIFIED_EFFECT_STATUSES,
    Approval,
    Checkpoint,
    Effect,
    EventKind,
    LedgerEvent,
    Run,
    Trigger,
    Workflow,
)
from stateboard.canonical import canonical_json, digest, sha256_hex
from stateboard.errors import Conflict, Forbidden, Invalid, NotFound

GENESIS_HASH = "0" * 64
CHECKPOINT_MAX_BYTES = 64 * 1024
SUMMARY_MAX_CHARS = 280
CHECKPOINT_FIELDS = frozenset({
    "stage", "resume_after", "retry_count", "max_retries", "allowed_next_stages", "observed_effects",
    "state_table", "version_boundary", "assertions", "pending_intents", "input_fingerprint",
    "policy_version", "env_fingerprint", "created_at", "expires_at",
})
TRANSCRIPT_FIELDS = frozenset({
    "messages", "message_list", "transcript", "transcripts", "conversation", "chat", "chat_history",
    "history", "summary_chain", "summaries", "tool_schemas", "tools", "tool_calls", "tool_outputs",
    "prompt", "prompts", "completion", "raw_output",
})
AGENT_KINDS = STAGE_OUTCOME_KINDS | {"corrected"}


# ---------------------------------------------------------------- fingerprints and hashes

def input_fingerprint(*, workflow_slug: str, intent: str, inputs, policy_version: str) -> str:
    return digest({"workflow": workflow_slug, "intent": intent, "inputs": inputs, "policy_version": policy_version})


def effect_key_default(*, workflow_slug: str, intent: str, fingerprint: str, stage: str) -> str:
    return digest([workflow_slug, intent, fingerprint, stage])


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
                      "lease_expires_at", "updated_at", "ended_at", "decision", "decided_at", "retried_at")
@dataclass
class _RunWriter:
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


def _spec(workflow: Workflow) -> recovery.WorkflowSpec:
    return recovery.WorkflowSpec(tuple(workflow.stages), frozenset(workflow.effect_stages), workflow.max_retries)


def _stage_status(run: Run) -> dict[str, str]:
    return {stage: entry.get("status") for stage, entry in (run.stage_states or {}).items()}


def _lock_run(run_id, *, client_event_id: str | None = None) -> Run:
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


# ---------------------------------------------------------------- trigger and decide

def _checkpoint_info(cp: Checkpoint | None, previous: Checkpoint | None, now: datetime):
    if cp is None:
        return None
    payload = cp.payload or {}
    monotonic = previous is None or (
        cp.created_at >= previous.created_at
        and (cp.version_boundary is None or previous.version_boundary is None
             or cp.version_boundary >= previous.version_boundary)
    )
    return recovery.CheckpointInfo(
        id=cp.id, run_id=str(cp.run_id), input_fingerprint=cp.input_fingerprint,
        policy_version=cp.policy_version, env_fingerprint=cp.env_fingerprint,
        expired=cp.expires_at <= now, state_table=payload.get("state_table") or {},
        observed_effects=tuple(payload.get("observed_effects") or ()),
        asserted_stages=frozenset(a.get("stage") for a in payload.get("assertions") or ()
                                  if isinstance(a, dict) and a.get("pointer")),
        version_boundary=cp.version_boundary, monotonic=monotonic,
    )


def _failed_runs_since_progress(*, workflow_id: int, intent: str, fingerprint: str,
                                checkpoint: Checkpoint | None) -> int:
    """Runs of this intent and fingerprint that ended failed since the later of the latest checkpoint
    and the latest on-call retry (one indexed read)."""
    rows = sql.select_rows(Run, ["state", "ended_at", "retried_at"],
                           "workflow_id = %s AND intent = %s AND input_fingerprint = %s "
                           "AND (state = 'failed' OR retried_at IS NOT NULL)", [workflow_id, intent, fingerprint])
    moments = [retried for _, _, retried in rows if retried is not None]
    if checkpoint is not None:
        moments.append(checkpoint.created_at)
    since = max(moments, default=None)
    return sum(1 for state, ended, _ in rows if state == "failed" and (since is None or (ended and ended > since)))


def recovery_input_gather(*, workflow: Workflow, intent: str, fingerprint: str, policy_version: str,
                          env_fingerprint: str, others: list[Run], now: datetime) -> tuple[recovery.RecoveryInput, dict]:
    """Read L2/L3 for (workflow, intent) into the plain data the pure decision needs (indexed reads)."""
    scope = "workflow_id = %s AND intent = %s"
    latest_two = sql.select_models(Checkpoint, scope, [workflow.id, intent], order="id DESC", limit=2)
    latest = latest_two[0] if latest_two else None
    if latest is not None and latest.input_fingerprint == fingerprint:
        same_fp = latest
    else:
        found = sql.select_models(Checkpoint, scope + " AND input_fingerprint = %s", [workflow.id, intent, fingerprint],
                                  order="id DESC", limit=1)
        same_fp = found[0] if found else None
    effects = [
        recovery.EffectInfo(key=key, stage=stage, status=status, run_id=str(run_id))
        for key, stage, status, run_id in sql.select_rows(
            Effect, ["idempotency_key", "stage", "status", "run"], scope + " AND input_fingerprint = %s",
            [workflow.id, intent, fingerprint])
    ]
    failed_count = _failed_runs_since_progress(workflow_id=workflow.id, intent=intent, fingerprint=fingerprint,
                                               checkpoint=same_fp)
    existing_keys: frozenset[str] = frozenset()
    store_version = 0
    if latest is not None and latest.input_fingerprint == fingerprint:
        observed = (latest.payload or {}).get("observed_effects") or []
        keys = [k for k in observed if isinstance(k, str)]
        if keys:
            existing_keys = frozenset(key for (key,) in sql.select_rows(
                Effect, ["idempotency_key"], f"idempotency_key IN ({', '.join(['%s'] * len(keys))})", keys))
        if latest.version_boundary is not None:
            from knowledge.selectors import store_version as knowledge_store_version

            store_version = knowledge_store_version()
    other_runs = [
        recovery.OtherRun(id=str(r.id), state=r.state, input_fingerprint=r.input_fingerprint,
                          active=r.state in HOLDING_STATES)
        for r in others
    ]
    inp = recovery.RecoveryInput(
        workflow=_spec(workflow), input_fingerprint=fingerprint, policy_version=policy_version,
        env_fingerprint=env_fingerprint, other_runs=other_runs,
        latest_checkpoint=_checkpoint_info(latest, latest_two[1] if len(latest_two) > 1 else None, now),
        latest_checkpoint_same_fingerprint=_checkpoint_info(same_fp, None, now),
        effects=effects, failed_runs_since_progress=failed_count,
        existing_effect_keys=existing_keys, store_version=store_version,
    )
    context = {"checkpoints": {c.id: c for c in (latest, same_fp) if c is not None}, "retry_count": failed_count}
    return inp, context


def _lease_expired(run: Run, now: datetime) -> bool:
    return run.state in LEASED_STATES and run.lease_expires_at is not None and run.lease_expires_at <= now


def _lock_workflow_and_run(run_id) -> tuple[Workflow, Run]:
    """Lock in the order every writer uses: the workflow row first, then the run."""
    try:
        workflow_id = Run.objects.filter(id=run_id).values_list("workflow_id", flat=True).first()
    except (ValueError, TypeError, DjangoValidationError):
        workflow_id = None
    if workflow_id is None:
        raise NotFound("run_not_found", f"No run with id {run_id}.")
    workflow = Workflow.objects.select_for_update().get(id=workflow_id)
    return workflow, _lock_run(run_id)


def _expire_dead_leases(*, workflow: Workflow, intent: str, now: datetime, exclude=None) -> list[Run]:
    """Lock the intent's holding/escalated runs; move those whose lease expired to ``failed``."""
    runs = list(Run.objects.select_for_update(of=("self",)).select_related("workflow")
                .filter(workflow=workflow, intent=intent, state__in=(*HOLDING_STATES, "escalated"))
                .exclude(id=exclude))
    alive = []
    for run in runs:
        if _lease_expired(run, now):
            writer = _RunWriter(run, "system", now)
            writer.transition("failed", "lease_expired", cause="lease_expired", lease_owner=run.lease_owner)
            writer.flush()
        else:
            alive.append(run)
    return alive


def _initial_stage_states(decision: recovery.Decision, checkpoints: dict, effects_by_stage: dict) -> dict:
    """The new run's view of the work: done stages with the pointers that assert them."""
    cp = checkpoints.get(decision.checkpoint)
    table = (cp.payload or {}).get("state_table", {}) if cp else {}
    assertions = {a.get("stage"): a for a in ((cp.payload or {}).get("assertions") or [])
                  if isinstance(a, dict)} if cp else {}
    states = {}
    for stage, status in decision.stage_status.items():
        entry = {"status": status}
        source = assertions.get(stage) or table.get(stage) or {}
        if source.get("pointer"):
            entry["pointer"] = source["pointer"]
            entry["digest"] = source.get("digest", "")
        effect = effects_by_stage.get(stage)
        if effect is not None:
            entry["effect_key"] = effect.key
            entry.setdefault("pointer", f"ledger:{effect.run_id}")
        states[stage] = entry
    return states


def _apply_decision(writer: _RunWriter, inp: recovery.RecoveryInput, context: dict, *, from_state: str) -> recovery.Decision:
    decision = recovery.recovery_decide(inp)
    run = writer.run
    effects_by_stage = {e.stage: e for e in inp.effects if e.status != "failed"}
    run.stage_states = _initial_stage_states(decision, context["checkpoints"], effects_by_stage)
    run.decision = {**decision.as_dict(), "retry_count": context["retry_count"],
                    "max_retries": inp.workflow.max_retries}
    run.decided_at = writer.now
    run.current_stage = decision.resume_from or ""
    nothing_found = decision.reason_code == "no_checkpoint"
    if from_state in ("captured", "escalated"):
        writer.transition("restore", cause="retried" if from_state == "escalated" else "decided")
    if not nothing_found:
        writer.transition("compare", cause="decided")
    writer.emit(EventKind.DECIDED, reason_code=decision.reason_code, data=run.decision)
    writer.transition(decision.outcome, decision.reason_code, cause="decided")
    if decision.outcome in ("fresh", "resume", "verify_only"):
        writer.renew_lease()
    return decision


@transaction.atomic
def run_trigger(*, workflow_slug: str, inputs, intent: str | None = None, trigger: str = Trigger.API,
                trigger_key: str | None = None, env_fingerprint: str = "", actor: str = "system") -> tuple[Run, bool]:
    """Trigger a run: dedupe by trigger key, expire dead leases, decide, record. Returns (run, created)."""
    try:
        workflow = Workflow.objects.select_for_update().get(slug=workflow_slug)
    except Workflow.DoesNotExist:
        raise Invalid("unknown_workflow", f"No workflow with slug {workflow_slug!r}.")
    intent = intent or workflow.slug
    if trigger not in Trigger.values:
        raise Invalid("invalid_trigger", f"trigger must be one of {', '.join(Trigger.values)}.")
    if trigger_key:
        existing = Run.objects.filter(workflow=workflow, trigger_key=trigger_key).first()
        if existing is not None:
            if existing.intent == intent and canonical_json(existing.inputs) == canonical_json(inputs):
                return existing, False
            raise Conflict("trigger_key_mismatch",
                           f"trigger_key {trigger_key!r} was already used with another intent or other inputs.",
                           run=str(existing.id))
    else:
        trigger_key = f"{trigger}:{uuid.uuid4()}"

    now = timezone.now()
    fingerprint = input_fingerprint(workflow_slug=workflow.slug, intent=intent, inputs=inputs,
                                    policy_version=workflow.policy_version)
    others = _expire_dead_leases(workflow=workflow, intent=intent, now=now)
    inp, context = recovery_input_gather(workflow=workflow, intent=intent, fingerprint=fingerprint,
                                         policy_version=workflow.policy_version,
                                         env_fingerprint=env_fingerprint, others=others, now=now)
    run = Run(workflow=workflow, intent=intent, trigger=trigger, trigger_key=trigger_key, inputs=inputs,
              input_fingerprint=fingerprint, policy_version=workflow.policy_version,
              env_fingerprint=env_fingerprint, state="captured", triggered_by=actor, created_at=now)
    writer = _RunWriter(run, actor, now)
    decision = _apply_decision(writer, inp, context, from_state="captured")
    try:
        with transaction.atomic():
            writer.flush(insert=True)
    except IntegrityError:
        # The workflow lock serialises triggers; this is the database's backstop.
        raise Conflict("active_run_exists", "Another run of this intent became active; trigger again.")
    if decision.outcome == "escalated":
        _escalation_raise(writer.run, now=now)
    return run, True


def runs_expire_leases(*, now: datetime | None = None) -> int:
    """Sweep: move runs whose executor went silent past the lease to ``failed``. Safe to run twice."""
    now = now or timezone.now()
    expired = 0
    candidates = (Run.objects.filter(state__in=LEASED_STATES, lease_expires_at__lte=now)
                  .values_list("id", flat=True)[:1000])
    for run_id in candidates:
        with transaction.atomic():
            run = _lock_run(run_id)
            if _lease_expired(run, now):
                writer = _RunWriter(run, "system", now)
                writer.transition("failed", "lease_expired", cause="lease_expired", lease_owner=run.lease_owner)
                writer.flush()
                expired += 1
    return expired


# ---------------------------------------------------------------- events

def _validate_evidence(evidence) -> list[dict]:
    if evidence in (None, ""):
        return []
    if not isinstance(evidence, list) or not all(isinstance(item, dict) for item in evidence):
        raise Invalid("invalid_evidence", "evidence must be a list of objects {uri, observed_at, digest?, excerpt?}.")
    for item in evidence:
        unknown = set(item) - {"uri", "observed_at", "digest", "excerpt", "claim"}
        if unknown:
            raise Invalid("invalid_evidence", f"Unknown evidence fields: {', '.join(sorted(unknown))}.")
        if "uri" in item and (not isinstance(item["uri"], str) or not item["uri"]):
            raise Invalid("invalid_evidence", "evidence uri must be a non-empty string.")
        if "observed_at" in item and parse_moment(item["observed_at"]) is None:
            raise Invalid("invalid_evidence", "evidence observed_at must be an ISO 8601 date-time with a timezone.")
        for text_field in ("digest", "excerpt"):
            if text_field in item and not isinstance(item[text_field], str):
                raise Invalid("invalid_evidence", f"evidence {text_field} must be a string.")
    return evidence


EFFECT_LIMITS = {"system": 200, "operation": 200, "reference": 1000}


def _validate_effect(effect) -> dict | None:
    if effect is None:
        return None
    if not isinstance(effect, dict) or set(effect) - set(EFFECT_LIMITS) or not all(
            isinstance(v, str) and len(v) <= EFFECT_LIMITS[k] for k, v in effect.items()):
        raise Invalid("invalid_effect", "effect must be an object {system, operation, reference} of strings "
                                        "(at most 200, 200 and 1000 characters).")
    return effect


def parse_moment(value) -> datetime | None:
    """An aware ISO 8601 date-time, or None (also for well-formed but impossible dates like Feb 30)."""
    if not isinstance(value, str):
        return None
    try:
        moment = parse_datetime(value)
    except ValueError:
        return None
    return moment if moment is not None and not timezone.is_naive(moment) else None


def _effect_out(effect: Effect) -> dict:
    return {"idempotency_key": effect.idempotency_key, "stage": effect.stage, "status": effect.status,
            "run": str(effect.run_id), "system": effect.system, "operation": effect.operation,
            "reference": effect.reference}


def _illegal(run: Run, detail: str):
    return Conflict("illegal_transition", detail, state=run.state, current_stage=run.current_stage)


@dataclass
class _Append:
    """One agent event being applied to a locked run."""

    writer: _RunWriter
    body: dict
    stage: str
    kind: str
    permit: Approval | None = None  # found and checked before the event is written, spent with it

    @property
    def run(self) -> Run:
        return self.writer.run

    @functools.cached_property
    def spec(self) -> recovery.WorkflowSpec:
        return _spec(self.run.workflow)

    def is_effect_stage(self) -> bool:
        return self.stage in self.run.workflow.effect_stages

    def next_stage(self) -> str | None:
        return recovery.first_not_done(self.spec, _stage_status(self.run))

    def mark(self, status: str, event: LedgerEvent, **extra) -> None:
        entry = dict(self.run.stage_states.get(self.stage) or {})
        entry.update(status=status, pointer=f"ledger:{self.run.id}/{event.seq}", digest=event.hash, **extra)
        self.run.stage_states = {**self.run.stage_states, self.stage: entry}

    def _effects(self):
        run = self.run
        return Effect.objects.filter(workflow_id=run.workflow_id, intent=run.intent,
                                     input_fingerprint=run.input_fingerprint, stage=self.stage)

    def effect_key(self) -> str | None:
        """The stage's effect: named by the agent, recorded when the run claimed it, or looked up."""
        key = self.body.get("idempotency_key") or (self.run.stage_states.get(self.stage) or {}).get("effect_key")
        if key:
            return key
        return (self._effects().filter(status__in=UNVERIFIED_EFFECT_STATUSES)
                .values_list("idempotency_key", flat=True).first())

    def has_unverified_effect(self) -> bool:
        key = self.effect_key()
        return bool(key) and self._effects().filter(idempotency_key=key, status__in=UNVERIFIED_EFFECT_STATUSES).exists()

    def effect_set(self, status: str, event: LedgerEvent, *, only_from=UNVERIFIED_EFFECT_STATUSES,
                   ref: dict | None = None) -> str | None:
        """Move this stage's effect to ``status`` if it is in ``only_from`` (one UPDATE); its key, or None."""
        key = self.effect_key()
        if not key:
            return None
        changes = {"status": status, "last_seq": event.seq, "updated_at": self.writer.now, **(ref or {})}
        updated = self._effects().filter(idempotency_key=key, status__in=only_from).update(**changes)
        return key if updated else None

    def after_pass(self, event: LedgerEvent) -> None:
        """A stage passed: server checkpoint, then completed when no stage is left."""
        self.writer.rows.append(_server_checkpoint(self.run, now=self.writer.now))
        self.writer.transition("checkpointed", cause=self.kind)

    def finish_if_done(self) -> None:
        if self.next_stage() is None:
            self.writer.transition("completed", "all_stages_done", cause=self.kind)


def _claim_effect(app: _Append, event: LedgerEvent) -> str:
    """Claim the effect key: a new row, or one whose effect never happened or was undone."""
    run, now, key = app.run, app.writer.now, event.idempotency_key
    claim = Effect(idempotency_key=key, workflow_id=run.workflow_id, intent=run.intent,
                   input_fingerprint=run.input_fingerprint, stage=app.stage, run_id=run.id, status="attempted",
                   claimed_seq=event.seq, last_seq=event.seq, created_at=now, updated_at=now)
    if sql.rows_insert(Effect, [claim], skip_conflicts=True):
        return key
    existing = Effect.objects.select_for_update().get(idempotency_key=key)
    if existing.status not in ("failed", "compensated"):
        raise Conflict("effect_exists", "This effect was already started; verify it, never re-execute it.",
                       effect=_effect_out(existing))
    existing.run, existing.status, existing.attempts = run, "attempted", existing.attempts + 1
    existing.input_fingerprint, existing.stage = run.input_fingerprint, app.stage
    existing.system = existing.operation = existing.reference = ""
    existing.claimed_seq = existing.last_seq = event.seq
    existing.updated_at = now
    existing.save()
    return key


def _prepare_started(app: _Append) -> dict:
    """Checks that need no write, before the event exists; returns data the event records."""
    run, stage = app.run, app.stage
    if run.state == "awaiting_approval":
        if run.current_stage != stage:
            raise _illegal(run, f"The run awaits approval for {run.current_stage!r}, not {stage!r}.")
    elif run.state in ("fresh", "resume", "checkpointed"):
        expected = app.next_stage()
        if stage != expected:
            raise _illegal(run, f"Stage {stage!r} may not start now; the next stage is {expected!r}.")
    else:
        raise _illegal(run, f"A stage cannot start while the run is {run.state!r}.")
    if stage in run.workflow.approval_stages:
        app.permit = _permit_find(app, kind=Approval.Kind.HIGH_IMPACT)
        return {"approval": str(app.permit.id)}
    return {}


def _on_started(app: _Append, event: LedgerEvent) -> None:
    if app.permit is not None:
        _permit_spend(app.permit, event)
    if app.is_effect_stage():
        app.mark("started", event, effect_key=_claim_effect(app, event))
    else:
        app.mark("started", event)
    app.run.current_stage = app.stage
    app.writer.transition("execute", cause="started")


def _require_executing(app: _Append) -> None:
    run = app.run
    if run.state != "execute" or run.current_stage != app.stage:
        raise _illegal(run, f"{app.kind!r} on {app.stage!r} needs the run executing that stage "
                            f"(it is {run.state!r} at {run.current_stage!r}).")


def _on_succeeded(app: _Append, event: LedgerEvent) -> None:
    _require_executing(app)
    if app.is_effect_stage():
        if not app.body.get("effect"):
            raise Invalid("effect_required", f"succeeded on effect stage {app.stage!r} must carry the effect "
                                             "{system, operation, reference}.")
        if app.effect_set("effective", event, ref=event.effect) is None:
            raise _illegal(app.run, "No claimed effect for this stage.")
    app.mark("succeeded", event)
    app.after_pass(event)
    if app.is_effect_stage():
        app.writer.transition("verify", "effect_attempted", cause="succeeded")
    else:
        app.finish_if_done()


def _on_skipped(app: _Append, event: LedgerEvent) -> None:
    run = app.run
    if run.state in ("fresh", "resume", "checkpointed"):
        if app.stage != app.next_stage():
            raise _illegal(run, f"Only the next stage ({app.next_stage()!r}) may be skipped.")
        run.current_stage = app.stage
        app.writer.transition("execute", cause="skipped")
    else:
        _require_executing(app)
        if app.is_effect_stage():
            app.effect_set("failed", event, only_from=("attempted",))  # skipped after start: it never happened
    app.mark("skipped", event)
    app.after_pass(event)
    app.finish_if_done()


def _on_failed(app: _Append, event: LedgerEvent) -> None:
    run = app.run
    if run.state == "execute" and run.current_stage == app.stage:
        if app.is_effect_stage():
            app.effect_set("failed", event)
        app.mark("failed", event)
        app.writer.transition("failed", event.reason_code or "stage_failed", cause="failed")
        return
    if run.state not in ("verify", "verify_only", "checkpointed") or not (
            app.is_effect_stage() and app.has_unverified_effect()):
        raise _illegal(run, f"'failed' on {app.stage!r} is not allowed while the run is {run.state!r}.")
    run.current_stage = app.stage
    if run.state != "verify":
        app.writer.transition("verify", cause="failed")
    if event.reason_code == "effect_absent":
        app.effect_set("failed", event)
        app.mark("failed", event)
        app.writer.transition("checkpointed", "effect_absent", cause="failed")
    else:
        app.writer.transition("compensate", event.reason_code or "effect_inconsistent", cause="failed")


def _on_unknown(app: _Append, event: LedgerEvent) -> None:
    _require_executing(app)
    if not app.is_effect_stage():
        raise Invalid("unknown_needs_effect_stage", "'unknown' is for effect stages whose outcome was not observed.")
    if app.effect_set("unknown", event, ref=event.effect) is None:
        raise _illegal(app.run, "No claimed effect for this stage.")
    app.mark("unknown", event)
    app.writer.transition("verify", "effect_unknown", cause="unknown")


def _on_verified(app: _Append, event: LedgerEvent) -> None:
    run, now = app.run, app.writer.now
    if not any(isinstance(e, dict) and e.get("uri") and e.get("observed_at") for e in event.evidence):
        raise Invalid("evidence_required", "'verified' needs at least one evidence item with uri and observed_at.")
    if not app.is_effect_stage():
        _require_executing(app)
        app.mark("verified", event)
        app.after_pass(event)
        app.finish_if_done()
        return
    executing = run.state == "execute" and run.current_stage == app.stage
    key = (app.effect_set("verified", event, ref=event.effect)
           if executing or run.state in ("verify", "verify_only", "checkpointed") else None)
    if key is None:
        raise _illegal(run, f"Nothing to verify on {app.stage!r} while the run is {run.state!r}.")
    run.current_stage = app.stage
    if executing:
        app.writer.transition("checkpointed", cause="verified")
    if run.state != "verify":
        app.writer.transition("verify", cause="verified")
    app.mark("verified", event, effect_key=key)
    app.writer.rows.append(_server_checkpoint(run, now=now))
    if app.next_stage() is None:
        app.writer.transition("completed", "all_stages_done", cause="verified")
    else:
        app.writer.transition("checkpointed", "effect_verified", cause="verified")


def _on_proposed(app: _Append, event: LedgerEvent) -> None:
    _require_executing(app)


def _on_corrected(app: _Append, event: LedgerEvent) -> None:
    corrects = event.data.get("corrects") if isinstance(event.data, dict) else None
    if not isinstance(corrects, int) or not 1 <= corrects < event.seq:
        raise Invalid("invalid_correction", "A correction needs data.corrects: the seq of an earlier event of this run.")




STRING_LIMITS = {"reason_code": 100, "client_event_id": 200, "idempotency_key": 200}


def _validate_event_body(run: Run, body: dict) -> tuple[str, str]:
    kind, stage = body.get("kind"), body.get("stage") or ""
    if not isinstance(kind, str) or kind not in EventKind.values:
        raise Invalid("unknown_kind", f"Unknown event kind {kind!r}.")
    if kind not in AGENT_KINDS and kind != "compensated":
        raise Invalid("kind_reserved", f"Kind {kind!r} is written by Stateboard itself, not posted.")
    if not isinstance(stage, str) or (stage not in run.workflow.stages and not (kind == "corrected" and stage == "")):
        raise Invalid("unknown_stage", f"Stage {stage!r} is not a stage of workflow {run.workflow.slug!r}.")
    for name, limit in STRING_LIMITS.items():
        if body.get(name) is not None and (not isinstance(body[name], str) or len(body[name]) > limit):
            raise Invalid("validation_error", f"{name} must be a string of at most {limit} characters.")
    if body.get("data") is not None and not isinstance(body["data"], dict):
        raise Invalid("validation_error", "data must be an object.")
    if len(canonical_json(body.get("data") or {})) > 16 * 1024:
        raise Invalid("data_too_large", "data is for small facts (at most 16 KiB); put artifacts behind evidence uris.")
    return kind, stage


@transaction.atomic
def event_append(*, run_id, body: dict, actor: str) -> tuple[LedgerEvent, bool]:
    """Append an agent's event; returns (event, created). A retried client_event_id returns the original."""
    client_event_id = body.get("client_event_id")
    if client_event_id is not None and (not isinstance(client_event_id, str) or not client_event_id
                                        or len(client_event_id) > 200):
        raise Invalid("validation_error", "client_event_id must be a non-empty string of at most 200 characters.")
    run = _lock_run(run_id, client_event_id=client_event_id)
    body_digest = digest(body)
    if client_event_id is not None and run.original_event_id is not None:
        original = LedgerEvent.objects.get(id=run.original_event_id)
        if original.body_digest == body_digest:
            return original, False
        raise Conflict("client_event_id_mismatch", "This client_event_id was used with a different body.",
                       seq=original.seq)
    kind, stage = _validate_event_body(run, body)
    if run.state in TERMINAL_STATES and kind != "corrected":
        raise _illegal(run, f"The run is {run.state!r}; it accepts no more stage events.")
    now = timezone.now()
    writer = _RunWriter(run, actor, now)
    app = _Append(writer, body, stage, kind)
    recorded = _PREPARE[kind](app) if kind in _PREPARE else {}  # e.g. the approval a start spends
    event = writer.emit(
        kind, stage, reason_code=body.get("reason_code") or "", data={**(body.get("data") or {}), **recorded},
        effect=_validate_effect(body.get("effect")), evidence=_validate_evidence(body.get("evidence")),
        client_event_id=client_event_id, body_digest=body_digest,
        idempotency_key=_event_effect_key(run, kind, stage, body),
    )
    _HANDLERS[kind](app, event)
    writer.renew_lease()
    writer.flush()
    claim_uris = [e["uri"] for e in event.evidence if e.get("uri", "").startswith("claim:")]
    if claim_uris:
        from knowledge import services as knowledge_services

        knowledge_services.claim_citations_record(event_id=event.id, run_id=run.id, actor=actor, at=now,
                                                  uris=claim_uris)
    return event, True


def _event_effect_key(run: Run, kind: str, stage: str, body: dict) -> str:
    """Events on an effect stage carry its idempotency key (the default key unless the agent names one)."""
    key = body.get("idempotency_key")
    if stage not in run.workflow.effect_stages or key:
        return key or ""
    if kind != "started":
        key = (run.stage_states.get(stage) or {}).get("effect_key")
    return key or effect_key_default(workflow_slug=run.workflow.slug, intent=run.intent,
                                     fingerprint=run.input_fingerprint, stage=stage)


# ---------------------------------------------------------------- checkpoints

def _server_checkpoint(run: Run, *, now: datetime) -> Checkpoint:
    """Derived from the run's ledger projection, so recovery works for agents that never save one.
    Returned unsaved: the run writer inserts it with the events."""
    spec = _spec(run.workflow)
    status = _stage_status(run)
    done = [s for s in spec.stages if recovery.stage_done(spec, s, status.get(s))]
    next_stage = recovery.first_not_done(spec, status)
    table = {s: {"status": e.get("status"), "pointer": e.get("pointer", "")} for s, e in run.stage_states.items()}
    payload = {
        "stage": run.current_stage,
        "retry_count": (run.decision or {}).get("retry_count", 0),
        "max_retries": run.workflow.max_retries,
        "allowed_next_stages": [next_stage] if next_stage else [],
        "observed_effects": sorted({e["effect_key"] for e in run.stage_states.values() if e.get("effect_key")}),
        "state_table": table,
        "assertions": [{"stage": s, "pointer": run.stage_states[s].get("pointer", ""),
                        "digest": run.stage_states[s].get("digest", "")} for s in done],
        "input_fingerprint": run.input_fingerprint,
        "policy_version": run.policy_version,
        "env_fingerprint": run.env_fingerprint,
    }
    return _checkpoint_build(run, payload=payload, source=Checkpoint.Source.SERVER, now=now)


def _checkpoint_build(run: Run, *, payload: dict, source: str, now: datetime,
                      expires_at: datetime | None = None, version_boundary: int | None = None) -> Checkpoint:
    """created_at and expires_at live in their columns (read back into the payload by the API)."""
    expires_at = expires_at or now + timedelta(seconds=run.workflow.checkpoint_ttl_seconds)
    if version_boundary is not None:
        payload = {**payload, "version_boundary": version_boundary}
    checkpoint = Checkpoint(
        workflow_id=run.workflow_id, intent=run.intent, run_id=run.id, source=source, payload=payload,
        input_fingerprint=run.input_fingerprint, policy_version=run.policy_version,
        env_fingerprint=run.env_fingerprint, version_boundary=version_boundary,
        created_at=now, expires_at=expires_at)
    return checkpoint


def _looks_like_transcript(value) -> str | None:
    """Name the first transcript-like part of a payload: message lists, chat turns, tool schemas."""
    stack = [("", value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, dict):
            if {"role", "content"} <= set(item):
                return path or "payload"
            for key, child in item.items():
                if key in TRANSCRIPT_FIELDS:
                    return f"{path}.{key}".lstrip(".")
                stack.append((f"{path}.{key}".lstrip("."), child))
        elif isinstance(item, list):
            stack.extend((f"{path}[{i}]", child) for i, child in enumerate(item))
    return None


def checkpoint_validate(run: Run, payload: dict, *, now: datetime) -> tuple[dict, datetime | None]:
    if not isinstance(payload, dict):
        raise Invalid("validation_error", "A checkpoint is a JSON object of whitelisted fields.")
    size = len(canonical_json(payload))
    if size > CHECKPOINT_MAX_BYTES:
        raise Invalid("checkpoint_too_large", f"Checkpoint is {size} bytes; the limit is {CHECKPOINT_MAX_BYTES} "
                                              "(64 KiB). Keep the minimum to resume; put artifacts behind pointers.")
    transcript = _looks_like_transcript(payload)
    if transcript:
        raise Invalid("checkpoint_transcript_rejected",
                      f"Checkpoints never hold transcripts, message lists, summary chains or tool schemas "
                      f"(found at {transcript!r}). Save the minimum to resume: state_table, assertions, pointers.",
                      field=transcript)
    unknown = sorted(set(payload) - CHECKPOINT_FIELDS)
    if unknown:
        raise Invalid("checkpoint_field_not_allowed", f"Fields not allowed in a checkpoint: {', '.join(unknown)}.",
                      fields=unknown, allowed=sorted(CHECKPOINT_FIELDS))
    for name, expected in (("input_fingerprint", run.input_fingerprint), ("policy_version", run.policy_version),
                           ("env_fingerprint", run.env_fingerprint)):
        if name in payload and payload[name] != expected:
            raise Invalid("checkpoint_mismatch", f"{name} does not match the run's ({expected!r}).", field=name)
    table = payload.get("state_table", {})
    if not isinstance(table, dict):
        raise Invalid("validation_error", "state_table must be an object {stage: {status, summary, pointer}}.")
    for stage, entry in table.items():
        if stage not in run.workflow.stages:
            raise Invalid("unknown_stage", f"state_table names unknown stage {stage!r}.")
        if not isinstance(entry, dict) or set(entry) - {"status", "summary", "pointer", "digest"}:
            raise Invalid("validation_error", f"state_table[{stage!r}] may hold only status, summary, pointer.")
        if len(str(entry.get("summary", ""))) > SUMMARY_MAX_CHARS:
            raise Invalid("summary_too_long", f"state_table[{stage!r}].summary exceeds {SUMMARY_MAX_CHARS} characters.")
    for name in ("observed_effects", "assertions", "pending_intents", "allowed_next_stages"):
        if name in payload and not isinstance(payload[name], list):
            raise Invalid("validation_error", f"{name} must be a list.")
    for name in ("observed_effects", "allowed_next_stages"):
        if not all(isinstance(item, str) and len(item) <= 200 for item in payload.get(name, [])):
            raise Invalid("validation_error", f"{name} must be a list of strings.")
    for assertion in payload.get("assertions", []):
        if not isinstance(assertion, dict) or assertion.get("stage") not in run.workflow.stages \
                or set(assertion) - {"stage", "pointer", "digest"} \
                or not all(isinstance(assertion.get(k, ""), str) for k in ("pointer", "digest")):
            raise Invalid("validation_error", "assertions must be objects {stage, pointer, digest} naming "
                                              "stages of this workflow.")
    boundary = payload.get("version_boundary")
    if boundary is not None and (not isinstance(boundary, int) or isinstance(boundary, bool) or boundary < 0):
        raise Invalid("validation_error", "version_boundary must be a non-negative integer.")
    expires_at = None
    if payload.get("expires_at") is not None:
        expires_at = parse_moment(payload["expires_at"])
        limit = now + timedelta(seconds=run.workflow.checkpoint_ttl_seconds)
        if expires_at is None or not now < expires_at <= limit:
            raise Invalid("validation_error", "expires_at must be an aware date-time within the workflow's checkpoint TTL.")
    clean = {k: v for k, v in payload.items() if k not in ("created_at", "expires_at")}
    clean.update(input_fingerprint=run.input_fingerprint, policy_version=run.policy_version,
                 env_fingerprint=run.env_fingerprint)
    return clean, expires_at


def checkpoint_save(*, run_id, payload: dict, actor: str) -> Checkpoint:
    """An agent's richer checkpoint (whitelisted, at most 64 KiB).

    Checkpoints are their own immutable layer (L3), not ledger events. On PostgreSQL the save is a
    single statement that locks the run row (refusing a finished run) and takes ``created_at`` from
    the database clock after the lock, so an intent's checkpoints stay in order without a transaction.
    """
    if set(payload) == {"payload"} and isinstance(payload["payload"], dict):
        payload = payload["payload"]
    run = _read_run(run_id)
    if run.state in TERMINAL_STATES:
        raise _illegal(run, f"The run is {run.state!r}; save checkpoints while it runs.")
    now = timezone.now()
    clean, expires_at = checkpoint_validate(run, payload, now=now)
    boundary = clean.get("version_boundary")
    if not sql.supports_locked_insert():
        with transaction.atomic():
            run = _lock_run(run_id)
            if run.state in TERMINAL_STATES:
                raise _illegal(run, f"The run is {run.state!r}; save checkpoints while it runs.")
            checkpoint = _checkpoint_build(run, payload=clean, source=Checkpoint.Source.AGENT, now=now,
                                           expires_at=expires_at, version_boundary=boundary)
            sql.rows_insert(Checkpoint, [checkpoint])
            return checkpoint
    checkpoint = Checkpoint(
        workflow_id=run.workflow_id, intent=run.intent, run_id=run.id, source=Checkpoint.Source.AGENT,
        payload=clean, input_fingerprint=run.input_fingerprint, policy_version=run.policy_version,
        env_fingerprint=run.env_fingerprint, version_boundary=boundary, created_at=now,
        expires_at=expires_at or now)
    ttl = None if expires_at else run.workflow.checkpoint_ttl_seconds
    if not sql.checkpoint_insert_if_running(checkpoint, ttl_seconds=ttl, terminal_states=sorted(TERMINAL_STATES)):
        raise _illegal(run, "The run finished while the checkpoint was being saved.")
    return checkpoint


def _read_run(run_id) -> Run:
    """The run with its workflow, without a lock."""
    try:
        run_uuid = run_id if isinstance(run_id, uuid.UUID) else uuid.UUID(str(run_id))
    except (ValueError, TypeError, AttributeError):
        raise NotFound("run_not_found", f"No run with id {run_id}.")
    found = sql.run_lock_read(run_uuid, None, lock=False)
    if found is None:
        raise NotFound("run_not_found", f"No run with id {run_id}.")
    return found[0]


def checkpoints_prune(*, now: datetime | None = None) -> int:
    """Sweep: delete expired checkpoints that are no longer the latest of their (intent, fingerprint)."""
    now = now or timezone.now()
    removed = 0
    expired = Checkpoint.objects.filter(expires_at__lte=now).values_list("id", "workflow_id", "intent",
                                                                          "input_fingerprint")[:5000]
    for checkpoint_id, workflow_id, intent, fingerprint in expired:
        latest = (Checkpoint.objects.filter(workflow_id=workflow_id, intent=intent, input_fingerprint=fingerprint)
                  .order_by("-id").values_list("id", flat=True).first())
        intent_latest = (Checkpoint.objects.filter(workflow_id=workflow_id, intent=intent)
                         .order_by("-id").values_list("id", flat=True).first())
        if checkpoint_id not in (latest, intent_latest):
            removed += Checkpoint.objects.filter(id=checkpoint_id).delete()[0]
    return removed


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


# ---------------------------------------------------------------- approvals and human decisions

ACTION_FIELDS = ("system", "operation", "target", "summary")


def action_validate(action) -> dict:
    if not isinstance(action, dict) or not all(isinstance(action.get(f), str) for f in ACTION_FIELDS) \
            or set(action) - set(ACTION_FIELDS):
        raise Invalid("invalid_action", "action must be an object {system, operation, target, summary} of strings.")
    return action


def audit_record(*, user, action: str, outcome: str, run_id=None, target: str = "", code: str = "",
                 reason: str = "", data: dict | None = None) -> None:
    """Human actions the ledger does not hold: refused attempts and workflow policy bumps."""
    from ledger.models import AuditEntry
    from stateboard.roles import actor_for, user_roles

    AuditEntry.objects.create(at=timezone.now(), actor=actor_for(user), role=",".join(sorted(user_roles(user))),
                              action=action, outcome=outcome, run_id=run_id, target=target, code=code,
                              reason=reason or "", data=data or {})


def _approval_out(approval: Approval) -> dict:
    return {"id": str(approval.id), "kind": approval.kind, "stage": approval.stage, "status": approval.status}


@transaction.atomic
def approval_request(*, run_id, kind: str, stage: str, action, actor: str, user=None) -> tuple[Approval, bool]:
    """An agent asks for a human decision; a high-impact request puts the run in ``awaiting_approval``."""
    run = _lock_run(run_id)
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
    writer = _RunWriter(run, actor, now)
    if kind == Approval.Kind.HIGH_IMPACT:
        if stage not in run.workflow.approval_stages:
            raise Invalid("not_an_approval_stage", f"Stage {stage!r} is not an approval stage of this workflow.")
        expected = recovery.first_not_done(_spec(run.workflow), _stage_status(run))
        if run.state not in ("fresh", "resume", "checkpointed", "awaiting_approval") or stage != expected:
            raise _illegal(run, f"Approval for {stage!r} can be requested when it is the next stage "
                                f"(run is {run.state!r}, next stage {expected!r}).")
    elif run.state not in ("compensate",):
        raise _illegal(run, "A compensation is requested for a run in 'compensate'.")
    approval = Approval.objects.create(
        kind=kind, run=run, stage=stage, action=action, action_digest=digest(action),
        policy_version=run.workflow.policy_version, input_fingerprint=run.input_fingerprint,
        requested_by=actor, requested_by_user=user, created_at=now,
        deadline=now + timedelta(seconds=run.workflow.approval_ttl_seconds))
    writer.emit(EventKind.APPROVAL_REQUESTED, stage, data={"approval": str(approval.id), "kind": kind, "action": action})
    if kind == Approval.Kind.HIGH_IMPACT:
        if run.state != "awaiting_approval":
            run.current_stage = stage
            writer.transition("awaiting_approval", "approval_requested", cause="approval_requested", approval=str(approval.id))
        run.lease_expires_at = None  # no lease expiry while a human decides
    else:
        writer.renew_lease()
    writer.flush()
    return approval, True


def _permit_find(app: _Append, *, kind: str) -> Approval:
    """The approved, unconsumed permit for exactly this action, policy, input and deadline, locked."""
    run, now = app.run, app.writer.now
    permits = Approval.objects.select_for_update().filter(kind=kind, status="approved", consumed_at__isnull=True)
    if kind == Approval.Kind.HIGH_IMPACT:  # a permit outlives the run that asked for it
        permits = permits.filter(run__workflow_id=run.workflow_id, run__intent=run.intent, stage=app.stage)
    else:
        permits = permits.filter(run=run)
    permit = permits.order_by("-decided_at").first()
    if permit is None:
        raise Conflict("approval_required", f"{app.kind!r} on {app.stage!r} needs an approved request first.")
    action = app.body.get("action")
    if action is None:
        raise Invalid("action_required", f"{app.kind!r} on {app.stage!r} must carry the approved action object.")
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


def _permit_spend(permit: Approval, event: LedgerEvent) -> None:
    permit.consumed_at, permit.consumed_seq = event.at, event.seq
    permit.save(update_fields=["consumed_at", "consumed_seq"])


def _decide_escalation(approval: Approval, *, approve: bool, user, reason: str) -> None:
    if approve:
        run_retry(run_id=approval.run_id, user=user, reason=reason or "approved escalation")
    else:
        run_abandon(run_id=approval.run_id, user=user, reason=reason)


@transaction.atomic
def approval_decide(*, approval_id, user, approve: bool, reason: str = "") -> Approval:
    """Approve or reject once. Repeating the same decision changes nothing; a conflicting one is 409."""
    from stateboard.roles import EDITOR, ONCALL, acting_role, actor_for, has_role, is_agent

    try:
        run_id = Approval.objects.values_list("run_id", flat=True).get(id=approval_id)
    except (Approval.DoesNotExist, ValueError, TypeError, DjangoValidationError):
        raise NotFound("approval_not_found", f"No approval with id {approval_id}.")
    actor, verb = actor_for(user), ("approve" if approve else "reject")
    _, run = _lock_workflow_and_run(run_id)
    approval = Approval.objects.select_for_update().get(id=approval_id)
    allowed = {ONCALL} if approval.kind == Approval.Kind.ESCALATION else {EDITOR}
    role = acting_role(user, allowed)

    if is_agent(user):  # agents propose, people decide: an agent identity holding a human role too
        raise Forbidden("permission_denied", "Agents never decide approvals.")
    if not has_role(user, *allowed):
        raise Forbidden("permission_denied", f"Only {'/'.join(sorted(allowed))} may decide {approval.kind} approvals.")
    wanted = "approved" if approve else "rejected"
    if approval.status == wanted:
        return approval
    if approval.status != "pending":
        raise Conflict("approval_decided", f"This request is already {approval.status}.", status=approval.status)
    if approval.requested_by_user_id is not None and approval.requested_by_user_id == user.id:
        raise Forbidden("requester_cannot_decide", "The requester cannot decide their own request.")
    if not approve and not reason.strip():
        raise Invalid("reason_required", "A rejection needs a reason.")
    now = timezone.now()
    if approval.status == "pending" and now > approval.deadline:
        raise Conflict("approval_expired", "The decision deadline has passed; the request expired.")
    if approval.kind == Approval.Kind.ESCALATION:
        _decide_escalation(approval, approve=approve, user=user, reason=reason)
        approval.refresh_from_db()
        return approval
    approval.status, approval.decided_by, approval.decided_role = wanted, actor, role
    approval.reason, approval.decided_at = reason, now
    approval.save(update_fields=["status", "decided_by", "decided_role", "reason", "decided_at"])
    writer = _RunWriter(run, actor, now)
    writer.emit(EventKind.APPROVED if approve else EventKind.REJECTED, approval.stage, reason_code=verb,
                data={"approval": str(approval.id), "kind": approval.kind, "role": role, "reason": reason})
    if approve and run.state == "awaiting_approval":
        # The human has decided: the agent's lease runs again, so a dead agent is still noticed.
        run.lease_expires_at = now + timedelta(seconds=run.workflow.lease_seconds)
    if not approve:
        if approval.kind == Approval.Kind.HIGH_IMPACT and run.state == "awaiting_approval":
            writer.transition("abandoned", "approval_rejected", cause="rejected", reason=reason)
        elif approval.kind == Approval.Kind.COMPENSATION and run.state == "compensate":
            writer.transition("escalated", "compensation_rejected", cause="rejected", reason=reason)
    writer.flush()
    if run.state == "escalated":
        _escalation_raise(run, now=now)
    return approval


def _escalation_raise(run: Run, *, now: datetime) -> Approval:
    """One open escalation per problem: a pending escalation request for on-call."""
    existing = Approval.objects.filter(run=run, kind=Approval.Kind.ESCALATION, status="pending").first()
    if existing is not None:
        return existing
    reason = (run.decision or {}).get("reason_code", "") if run.state == "escalated" else ""
    action = {"system": "stateboard", "operation": "resolve_escalation", "target": str(run.id),
              "summary": f"Run escalated ({reason or 'needs on-call'}): retry, compensate or abandon."}
    return Approval.objects.create(
        kind=Approval.Kind.ESCALATION, run=run, stage=run.current_stage, action=action, action_digest=digest(action),
        policy_version=run.workflow.policy_version, input_fingerprint=run.input_fingerprint,
        requested_by="system", created_at=now, deadline=now + timedelta(seconds=run.workflow.approval_ttl_seconds))


def _close_escalation(run: Run, *, status: str, actor: str, role: str, reason: str, now: datetime) -> None:
    Approval.objects.filter(run=run, kind=Approval.Kind.ESCALATION, status="pending").update(
        status=status, decided_by=actor, decided_role=role, reason=reason, decided_at=now)


def _oncall(user) -> tuple[str, str]:
    from stateboard.roles import ONCALL, acting_role, actor_for, has_role, is_agent

    if is_agent(user) or not has_role(user, ONCALL):
        raise Forbidden("permission_denied", "Only on-call may retry, compensate or abandon runs.")
    return actor_for(user), acting_role(user, {ONCALL})


@transaction.atomic
def run_retry(*, run_id, user, reason: str = "") -> Run:
    """On-call retry of an escalated run: the retry budget starts afresh and the run is decided again."""
    actor, role = _oncall(user)
    workflow, run = _lock_workflow_and_run(run_id)
    if run.state != "escalated":
        raise _illegal(run, f"Only an escalated run can be retried (this one is {run.state!r}).")
    now = timezone.now()
    writer = _RunWriter(run, actor, now)
    writer.emit(EventKind.RETRIED, run.current_stage, reason_code="oncall_retry", data={"role": role, "reason": reason})
    run.retried_at = now
    others = _expire_dead_leases(workflow=workflow, intent=run.intent, now=now, exclude=run.id)
    writer.flush()  # the retried_at mark must be visible to the gathering below
    writer = _RunWriter(run, actor, now)
    inp, context = recovery_input_gather(workflow=workflow, intent=run.intent, fingerprint=run.input_fingerprint,
                                         policy_version=run.policy_version, env_fingerprint=run.env_fingerprint,
                                         others=others, now=now)
    decision = _apply_decision(writer, inp, context, from_state="escalated")
    writer.flush()
    _close_escalation(run, status="approved", actor=actor, role=role, reason=reason or "retry", now=now)
    if decision.outcome == "escalated":
        _escalation_raise(run, now=now)
    return run


@transaction.atomic
def run_abandon(*, run_id, user, reason: str) -> Run:
    run = _lock_run(run_id)
    actor, role = _oncall(user)
    if not (reason or "").strip():
        raise Invalid("reason_required", "Abandoning a run needs a reason.")
    if run.state != "escalated":
        raise _illegal(run, f"Only an escalated run can be abandoned; this one is {run.state!r}.")
    now = timezone.now()
    writer = _RunWriter(run, actor, now)
    writer.emit(EventKind.ABANDONED, run.current_stage, reason_code="oncall_abandon", data={"role": role, "reason": reason})
    writer.transition("abandoned", "oncall_abandon", cause="abandoned", reason=reason)
    writer.flush()
    _close_escalation(run, status="rejected", actor=actor, role=role, reason=reason, now=now)
    Approval.objects.filter(run=run, status="pending").update(status="expired", decided_at=now)
    return run


def compensation_plan(run: Run) -> dict | None:
    """Undo from the ledger: each effect that happened, by its recorded reference; None if not deterministic."""
    effects = list(Effect.objects.filter(workflow_id=run.workflow_id, intent=run.intent,
                                         input_fingerprint=run.input_fingerprint)
                   .exclude(status__in=("failed", "compensated")).order_by("-claimed_seq"))
    if not effects or any(not e.reference for e in effects):
        return None
    undo = {"commit": "revert", "push": "revert_push", "deploy": "rollback", "publish": "unpublish"}
    steps = [f"{undo.get(e.operation, 'undo_' + (e.operation or e.stage))} {e.system}:{e.reference}" for e in effects]
    last = effects[0]
    return {
        "system": last.system or "stateboard",
        "operation": "compensate",
        "target": ",".join(e.reference for e in effects),
        "summary": "; ".join(steps)[:500],
    }


@transaction.atomic
def run_compensate(*, run_id, user, reason: str = "") -> tuple[Run, Approval | None]:
    """On-call proposes the compensation for approval; escalates when it cannot be done deterministically."""
    actor, role = _oncall(user)
    _, run = _lock_workflow_and_run(run_id)
    if run.state not in ("escalated", "compensate"):
        raise _illegal(run, f"Only an escalated run (or one in 'compensate') can be compensated; this one is {run.state!r}.")
    holder = (Run.objects.filter(workflow_id=run.workflow_id, intent=run.intent, state__in=HOLDING_STATES)
              .exclude(id=run.id).values_list("id", flat=True).first())
    if holder is not None:
        raise Conflict("active_run_exists", "Another run of this intent is active; compensate once it has finished.",
                       run=str(holder))
    now = timezone.now()
    writer = _RunWriter(run, actor, now)
    if run.state == "escalated":
        writer.transition("compensate", "oncall_compensate", cause="compensate", reason=reason)
    plan = compensation_plan(run)
    approval = None
    if plan is None:
        writer.transition("escalated", "compensation_not_deterministic", cause="compensate")
    else:
        pending = Approval.objects.filter(run=run, kind=Approval.Kind.COMPENSATION, status="pending").first()
        approval = pending or Approval.objects.create(
            kind=Approval.Kind.COMPENSATION, run=run, stage=run.current_stage, action=plan,
            action_digest=digest(plan), policy_version=run.workflow.policy_version,
            input_fingerprint=run.input_fingerprint, requested_by=actor, requested_by_user=user, created_at=now,
            deadline=now + timedelta(seconds=run.workflow.approval_ttl_seconds))
        if pending is None:
            writer.emit(EventKind.APPROVAL_REQUESTED, run.current_stage,
                        data={"approval": str(approval.id), "kind": "compensation", "action": plan, "role": role})
    writer.flush()
    _close_escalation(run, status="approved", actor=actor, role=role, reason=reason or "compensate", now=now)
    if run.state == "escalated":
        _escalation_raise(run, now=now)
    return run, approval


def _prepare_compensated(app: _Append) -> dict:
    """The executor performed the approved compensation and verified it."""
    if app.run.state != "compensate":
        raise _illegal(app.run, "'compensated' is posted by the executor of an approved compensation.")
    evidence = app.body.get("evidence") or []
    if not any(isinstance(e, dict) and e.get("uri") and e.get("observed_at") for e in evidence):
        raise Invalid("evidence_required", "'compensated' needs evidence that the undo was verified (uri, observed_at).")
    app.permit = _permit_find(app, kind=Approval.Kind.COMPENSATION)
    return {"approval": str(app.permit.id)}


def _on_compensated(app: _Append, event: LedgerEvent) -> None:
    run = app.run
    _permit_spend(app.permit, event)
    (Effect.objects.filter(workflow_id=run.workflow_id, intent=run.intent, input_fingerprint=run.input_fingerprint)
     .exclude(status__in=("failed", "compensated"))
     .update(status="compensated", last_seq=event.seq, updated_at=event.at))
    app.writer.transition("compensated", "compensation_verified", cause="compensated")


def approvals_expire(*, now: datetime | None = None) -> int:
    """Sweep: undecided requests past their deadline expire; a waiting run escalates. Safe to run twice."""
    now = now or timezone.now()
    expired = 0
    for approval_id, run_id in (Approval.objects.filter(status="pending", deadline__lte=now)
                                .values_list("id", "run_id")[:1000]):
        with transaction.atomic():
            run = _lock_run(run_id)
            approval = Approval.objects.select_for_update().get(id=approval_id)
            if approval.status != "pending":
                continue
            approval.status, approval.decided_at = "expired", now
            approval.save(update_fields=["status", "decided_at"])
            writer = _RunWriter(run, "system", now)
            writer.emit(EventKind.EXPIRED, approval.stage, reason_code="approval_expired",
                        data={"approval": str(approval.id), "kind": approval.kind})
            if approval.kind != Approval.Kind.ESCALATION and run.state in ("awaiting_approval", "compensate"):
                writer.transition("escalated", "approval_expired", cause="expired", approval=str(approval.id))
            writer.flush()
            if run.state == "escalated":
                _escalation_raise(run, now=now)  # an expired escalation is raised afresh: on-call must still see it
            expired += 1
    return expired


# Agent event kinds: an optional check before the event is written, then its effect on the run.
_PREPARE = {"started": _prepare_started, "compensated": _prepare_compensated}
_HANDLERS = {
    "compensated": _on_compensated,
    "started": _on_started, "succeeded": _on_succeeded, "skipped": _on_skipped, "failed": _on_failed,
    "unknown": _on_unknown, "verified": _on_verified, "proposed": _on_proposed, "corrected": _on_corrected,
}
