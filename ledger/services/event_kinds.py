"""What each kind of agent event does to a run: the kinds' handlers (``HANDLERS``), what some check and
record before the event is written (``PREPARE``), effect claims and the event's effect key. ``events``
applies them (``_event_apply``) under the lease and the body's checks."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from ledger import selectors
from ledger.domain import effects, recovery
from ledger.domain.attributes import attributes_merged
from ledger.models import Approval, Effect, EffectKey, LedgerEvent, Run
from ledger.services.approvals import action_validate, permit_find, permit_spend
from ledger.services.checkpoints import server_checkpoint
from ledger.services.handoff import executor_handoff
from ledger.services.rollback import compensation_done, compensation_scope
from ledger.services.versions import stage_generation
from ledger.services.writer import RunWriter, effect_key_default, effect_key_given, illegal, run_spec, stage_status
from ledger.store import store
from stateboard.errors import Conflict, Invalid


def effect_out(effect: Effect) -> dict:
    return {"idempotency_key": effect.idempotency_key, "stage": effect.stage, "status": effect.status,
            "run": str(effect.run_id), "system": effect.system, "operation": effect.operation,
            "reference": effect.reference}


@dataclass
class Append:
    """One agent event being applied to a locked run."""

    writer: RunWriter
    body: dict
    stage: str
    kind: str
    permit: Approval | None = None  # found and checked before the event is written, spent with it

    @property
    def run(self) -> Run:
        return self.writer.run

    @functools.cached_property
    def spec(self) -> recovery.WorkflowSpec:
        return run_spec(self.run)

    def is_effect_stage(self) -> bool:
        """A staged run has none: it claims no key and writes no effect (SPEC §10.3)."""
        return self.stage in self.run.workflow.effect_stages and not self.run.staged

    def next_stage(self) -> str | None:
        return recovery.first_not_done(self.spec, stage_status(self.run))

    def mark(self, status: str, event: LedgerEvent, **extra) -> None:
        entry = dict(self.run.stage_states.get(self.stage) or {})
        entry.update(status=status, pointer=f"ledger:{self.run.id}/{event.seq}", digest=event.hash, **extra)
        self.run.stage_states = {**self.run.stage_states, self.stage: entry}

    def _effects(self):
        run = self.run
        return selectors.effects_of(workflow_id=run.workflow_id, intent=run.intent,
                                    fingerprint=run.input_fingerprint).filter(stage=self.stage)

    @functools.cached_property
    def given_key(self) -> str:
        """The agent's ``idempotency_key`` as stored (namespaced: ``writer.effect_key_given``), or ""."""
        return effect_key_given(self.run, self.body.get("idempotency_key"))

    def effect_key(self) -> str | None:
        """The stage's effect: named by the agent, recorded when the run claimed it, or looked up."""
        key = self.given_key or (self.run.stage_states.get(self.stage) or {}).get("effect_key")
        if key:
            return key
        return (self._effects().filter(status__in=effects.UNVERIFIED)
                .values_list("idempotency_key", flat=True).first())

    def has_unverified_effect(self) -> bool:
        key = self.effect_key()
        return bool(key) and self._effects().filter(idempotency_key=key, status__in=effects.UNVERIFIED).exists()

    def effect_move(self, event: LedgerEvent, *, ref: dict | None = None) -> str | None:
        """Move this stage's effect as ``ledger.domain.effects.effect_next`` says (one UPDATE); its key, or None."""
        key = self.effect_key()
        target, sources = effects.effect_moves(self.kind, run_state=self.run.state, reason_code=event.reason_code)
        if not key or target is None:
            return None
        changes = {"status": target, "last_seq": event.seq, "updated_at": self.writer.now, **(ref or {})}
        moved = self._effects().filter(idempotency_key=key, status__in=sources).update(**changes)
        return key if moved else None

    def after_pass(self, event: LedgerEvent) -> None:
        """A stage passed: server checkpoint, then completed when no stage is left."""
        self.writer.rows.append(server_checkpoint(self.run, now=self.writer.now))
        self.writer.transition("checkpointed", cause=self.kind)

    def finish_if_done(self) -> None:
        if self.next_stage() is None and not self.run.goal_outdated:  # an outdated goal: moved instead
            self.writer.transition("completed", "all_stages_done", cause=self.kind)


def _claim_effect(app: Append, event: LedgerEvent) -> str:
    """Claim the effect key: a new row, or one whose effect never happened or was undone."""
    run, now, key = app.run, app.writer.now, event.idempotency_key
    claim = Effect(idempotency_key=key, workflow_id=run.workflow_id, intent=run.intent,
                   input_fingerprint=run.input_fingerprint, stage=app.stage, run_id=run.id, status="attempted",
                   claimed_seq=event.seq, last_seq=event.seq, created_at=now, updated_at=now)
    if store().effect_insert(claim):
        return key
    held_by = EffectKey.objects.get(idempotency_key=key).intent
    existing = Effect.objects.select_for_update().get(idempotency_key=key, intent=held_by)
    if existing.intent != run.intent:  # a key is one intent's for good: its effect stays in that intent
        raise Conflict("effect_exists", "This effect key belongs to another intent's effect; use a key of your own.",
                       effect=effect_out(existing))
    if effects.effect_next(existing.status, "started", run_state=run.state) is None:
        raise Conflict("effect_exists", "This effect was already started; verify it, never re-execute it.",
                       effect=effect_out(existing))
    existing.run, existing.status, existing.attempts = run, "attempted", existing.attempts + 1
    existing.input_fingerprint, existing.stage = run.input_fingerprint, app.stage
    existing.system = existing.operation = existing.reference = ""
    existing.claimed_seq = existing.last_seq = event.seq
    existing.updated_at = now
    Effect.objects.filter(pk=existing.pk, intent=existing.intent).update(**{  # (its one partition)
        f.attname: getattr(existing, f.attname) for f in Effect._meta.concrete_fields if not f.primary_key})
    return key


def _prepare_started(app: Append) -> dict:
    """Checks that need no write, before the event exists; returns data the event records."""
    run, stage = app.run, app.stage
    if run.state == "awaiting_approval":
        if run.current_stage != stage:
            raise illegal(run, f"The run awaits approval for {run.current_stage!r}, not {stage!r}.")
    elif run.state in ("fresh", "resume", "checkpointed"):
        expected = app.next_stage()
        if stage != expected:
            raise illegal(run, f"Stage {stage!r} may not start now; the next stage is {expected!r}.")
    else:
        raise illegal(run, f"A stage cannot start while the run is {run.state!r}.")
    if stage in run.workflow.approval_stages and not run.staged:  # a staged run passes without a permit
        app.permit = permit_find(run=run, stage=stage, kind=Approval.Kind.HIGH_IMPACT, action=app.body.get("action"),
                                 now=app.writer.now, asked=f"{app.kind!r} on {stage!r}")
        return {"approval": str(app.permit.id)}
    return {}


def _on_started(app: Append, event: LedgerEvent) -> None:
    if app.permit is not None:
        permit_spend(app.permit, event)
    if app.is_effect_stage():
        app.mark("started", event, effect_key=_claim_effect(app, event))
    else:
        app.mark("started", event)
    app.run.current_stage = app.stage
    app.writer.transition("execute", cause="started")


def _require_executing(app: Append) -> None:
    run = app.run
    if run.state != "execute" or run.current_stage != app.stage:
        raise illegal(run, f"{app.kind!r} on {app.stage!r} needs the run executing that stage "
                            f"(it is {run.state!r} at {run.current_stage!r}).")


def _on_succeeded(app: Append, event: LedgerEvent) -> None:
    _require_executing(app)
    if app.is_effect_stage():
        if not app.body.get("effect"):
            raise Invalid("effect_required", f"succeeded on effect stage {app.stage!r} must carry the effect "
                                             "{system, operation, reference}.")
        if app.effect_move(event, ref=event.effect) is None:
            raise illegal(app.run, "No claimed effect for this stage.")
    app.mark("succeeded", event)
    app.after_pass(event)
    if app.is_effect_stage():
        app.writer.transition("verify", "effect_attempted", cause="succeeded")
    else:
        app.finish_if_done()


def _on_skipped(app: Append, event: LedgerEvent) -> None:
    run = app.run
    if run.state in ("fresh", "resume", "checkpointed"):
        if app.stage != app.next_stage():
            raise illegal(run, f"Only the next stage ({app.next_stage()!r}) may be skipped.")
        run.current_stage = app.stage
        app.writer.transition("execute", cause="skipped")
    else:
        _require_executing(app)
        if app.is_effect_stage():
            app.effect_move(event)  # skipped after start: it never happened
    app.mark("skipped", event)
    app.after_pass(event)
    app.finish_if_done()


def _on_failed(app: Append, event: LedgerEvent) -> None:
    run = app.run
    if run.state == "execute" and run.current_stage == app.stage:
        if app.is_effect_stage():
            app.effect_move(event)
        app.mark("failed", event)
        app.writer.transition("failed", event.reason_code or "stage_failed", cause="failed")
        return
    if run.state not in ("verify", "verify_only", "checkpointed") or not (
            app.is_effect_stage() and app.has_unverified_effect()):
        raise illegal(run, f"'failed' on {app.stage!r} is not allowed while the run is {run.state!r}.")
    run.current_stage = app.stage
    if run.state != "verify":
        app.writer.transition("verify", cause="failed")
    if event.reason_code == "effect_absent":
        app.effect_move(event)
        app.mark("failed", event)
        app.writer.transition("checkpointed", "effect_absent", cause="failed")
    else:
        app.writer.transition("compensate", event.reason_code or "effect_inconsistent", cause="failed")


def _on_unknown(app: Append, event: LedgerEvent) -> None:
    _require_executing(app)
    if not app.is_effect_stage():
        raise Invalid("unknown_needs_effect_stage", "'unknown' is for effect stages whose outcome was not observed.")
    if app.effect_move(event, ref=event.effect) is None:
        raise illegal(app.run, "No claimed effect for this stage.")
    app.mark("unknown", event)
    app.writer.transition("verify", "effect_unknown", cause="unknown")


def _on_verified(app: Append, event: LedgerEvent) -> None:
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
    key = (app.effect_move(event, ref=event.effect)
           if executing or run.state in ("verify", "verify_only", "checkpointed") else None)
    if key is None:
        raise illegal(run, f"Nothing to verify on {app.stage!r} while the run is {run.state!r}.")
    run.current_stage = app.stage
    if executing:
        app.writer.transition("checkpointed", cause="verified")
    if run.state != "verify":
        app.writer.transition("verify", cause="verified")
    app.mark("verified", event, effect_key=key)
    app.writer.rows.append(server_checkpoint(run, now=now))
    if app.next_stage() is None and not run.goal_outdated:
        app.writer.transition("completed", "all_stages_done", cause="verified")
    else:
        app.writer.transition("checkpointed", "effect_verified", cause="verified")


def _on_proposed(app: Append, event: LedgerEvent) -> None:
    if app.stage not in (app.run.workflow.executors or {}):
        _require_executing(app)
        return
    run = app.run
    if run.state not in ("fresh", "resume", "checkpointed") or app.stage != app.next_stage():
        raise illegal(run, f"{app.stage!r} can be proposed when it is the next stage "
                            f"(run is {run.state!r}, next stage {app.next_stage()!r}).")
    if run.staged:  # a staged run's proposal passes the stage and calls nothing (SPEC §10.3)
        action_validate(app.body.get("action"), params=True)
        run.current_stage = app.stage
        app.writer.transition("execute", cause="proposed")
        app.mark("succeeded", event, proposed=True)
        app.after_pass(event)
        app.finish_if_done()
        return
    executor_handoff(app.writer, stage=app.stage, action=app.body.get("action"), proposal_seq=event.seq)


def _on_corrected(app: Append, event: LedgerEvent) -> None:
    corrects = event.data.get("corrects") if isinstance(event.data, dict) else None
    if not isinstance(corrects, int) or not 1 <= corrects < event.seq:
        raise Invalid("invalid_correction", "A correction needs data.corrects: the seq of an earlier event of this run.")


def _on_attributes_set(app: Append, event: LedgerEvent) -> None:
    """SPEC §15: the lease holder adds, changes or (null) removes attributes; on the run's current stage, it
    moves nothing (the merged attributes hold at most 16 keys)."""
    if app.stage != app.run.current_stage:
        raise illegal(app.run, f"'attributes_set' is posted on the run's current stage "
                               f"({app.run.current_stage!r}), not {app.stage!r}.")
    app.run.attributes = attributes_merged(app.run.attributes, (event.data or {}).get("attributes"))


def event_effect_key(run: Run, kind: str, stage: str, key: str) -> str:
    """Events on an effect stage carry its idempotency key (the default key unless the agent names one)."""
    if run.staged or kind == "attributes_set":
        return ""  # a staged run claims no key; attributes concern no effect
    if stage not in run.workflow.effect_stages or key:
        return key or ""
    if kind != "started":
        key = (run.stage_states.get(stage) or {}).get("effect_key")
    if key:
        return key
    generation = stage_generation(workflow_id=run.workflow_id, intent=run.intent, fingerprint=run.input_fingerprint,
                                  stage=stage)
    return effect_key_default(workflow_slug=run.workflow.slug, intent=run.intent, fingerprint=run.input_fingerprint,
                              stage=stage, generation=generation)


def _prepare_compensated(app: Append) -> dict:
    """The executor performed the approved compensation and verified it."""
    if app.run.state != "compensate":
        raise illegal(app.run, "'compensated' is posted by the executor of an approved compensation.")
    evidence = app.body.get("evidence") or []
    if not any(isinstance(e, dict) and e.get("uri") and e.get("observed_at") for e in evidence):
        raise Invalid("evidence_required", "'compensated' needs evidence that the undo was verified (uri, observed_at).")
    app.permit = permit_find(run=app.run, stage=app.stage, kind=Approval.Kind.COMPENSATION,
                             action=app.body.get("action"), now=app.writer.now, asked=f"{app.kind!r} on {app.stage!r}")
    keys, rollback = compensation_scope(app.run)
    return {"approval": str(app.permit.id), "effects": keys, **({"rollback": True} if rollback else {})}


def _on_compensated(app: Append, event: LedgerEvent) -> None:
    permit_spend(app.permit, event)
    compensation_done(app.writer, event)


PREPARE = {"started": _prepare_started, "compensated": _prepare_compensated}
HANDLERS = {
    "compensated": _on_compensated,
    "started": _on_started, "succeeded": _on_succeeded, "skipped": _on_skipped, "failed": _on_failed,
    "unknown": _on_unknown, "verified": _on_verified, "proposed": _on_proposed, "corrected": _on_corrected,
    "attributes_set": _on_attributes_set,
}
