"""The recovery decision (SPEC §3) as a pure function of plain data.

``recovery_decide`` never touches the database: ``ledger.services`` gathers a
``RecoveryInput`` and records the ``Decision``. That keeps it property-testable.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Mapping, Sequence

from ledger.domain.effects import UNDONE, UNVERIFIED


@dataclass(frozen=True)
class WorkflowSpec:
    stages: tuple[str, ...]
    effect_stages: frozenset[str] = frozenset()
    max_retries: int = 3


@dataclass(frozen=True)
class OtherRun:
    """Another run of the same intent that may still hold it."""

    id: str
    state: str
    input_fingerprint: str
    active: bool  # live lease or waiting for a human


@dataclass(frozen=True)
class CheckpointInfo:
    id: int | None
    run_id: str | None
    input_fingerprint: str
    policy_version: str
    env_fingerprint: str
    expired: bool
    state_table: Mapping[str, Mapping] = field(default_factory=dict)
    observed_effects: tuple[str, ...] = ()
    asserted_stages: frozenset[str] = frozenset()  # done stages backed by an assertion with a pointer
    version_boundary: int | None = None
    monotonic: bool = True  # not older, and version_boundary not lower, than its predecessor


@dataclass(frozen=True)
class EffectInfo:
    key: str
    stage: str
    status: str
    run_id: str | None = None


@dataclass(frozen=True)
class RecoveryInput:
    workflow: WorkflowSpec
    input_fingerprint: str
    policy_version: str
    env_fingerprint: str
    other_runs: Sequence[OtherRun] = ()
    latest_checkpoint: CheckpointInfo | None = None  # of the intent, any fingerprint
    latest_checkpoint_same_fingerprint: CheckpointInfo | None = None
    effects: Sequence[EffectInfo] = ()  # of this fingerprint
    failed_runs_since_progress: int = 0
    existing_effect_keys: frozenset[str] = frozenset()
    store_version: int = 0
    # Why the run is decided again, when not a plain trigger (SPEC §10): "staged" (a dry run, always
    # fresh), "goal_changed" (a new goal version: fresh), "rolled_back" (a rollback: resume).
    reopened: str = ""
    # SPEC §16: the workflow's cost since 00:00 UTC is at or over its cost_usd_per_day (a trigger only: a
    # person's retry goes ahead), and whether the day's one escalation stands already.
    day_budget_spent: bool = False
    day_escalation_stands: bool = False


@dataclass(frozen=True)
class Decision:
    outcome: str  # fresh | resume | verify_only | noop | escalated
    reason_code: str
    resume_from: str | None = None
    verify_effects: tuple[str, ...] = ()
    prior_run: str | None = None
    checkpoint: int | None = None
    failed_assertions: tuple[str, ...] = ()
    reset_stages: tuple[str, ...] = ()
    # The stage statuses the new run starts from: {stage: status}, done stages only.
    stage_status: Mapping[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {
            "outcome": self.outcome,
            "reason_code": self.reason_code,
            "resume_from": self.resume_from,
            "verify_effects": list(self.verify_effects),
            "prior_run": self.prior_run,
            "checkpoint": self.checkpoint,
            "failed_assertions": list(self.failed_assertions),
            "reset_stages": list(self.reset_stages),
        }


def stage_done(spec: WorkflowSpec, stage: str, status: str | None) -> bool:
    """Done means succeeded or skipped, or verified for an effect stage."""
    if stage in spec.effect_stages:
        return status in ("verified", "skipped")
    return status in ("succeeded", "skipped", "verified")


def first_not_done(spec: WorkflowSpec, status: Mapping[str, str]) -> str | None:
    return next((s for s in spec.stages if not stage_done(spec, s, status.get(s))), None)


def _done_status(spec: WorkflowSpec, checkpoint: CheckpointInfo | None, effects: Sequence[EffectInfo],
                 *, verified_only: bool = False) -> dict[str, str]:
    """Done stages per a checkpoint's state table plus the verified effects of the fingerprint."""
    status: dict[str, str] = {}
    # A checkpoint's "verified" on an effect stage no longer holds once that stage's effect was
    # isolated or compensated; only a verified effect of a later attempt makes the stage done again.
    undone = {e.stage for e in effects if e.status in UNDONE}
    if checkpoint is not None:
        for stage in spec.stages:
            st = (checkpoint.state_table.get(stage) or {}).get("status")
            if stage in undone and st == "verified":
                continue
            if stage_done(spec, stage, st) and (not verified_only or (stage in spec.effect_stages and st == "verified")):
                status[stage] = st
    for effect in effects:
        if effect.status == "verified" and effect.stage in spec.stages:
            status[effect.stage] = "verified"
    return status


def _failed_assertions(inp: RecoveryInput, cp: CheckpointInfo) -> list[str]:
    spec = inp.workflow
    failed = []
    if cp.input_fingerprint != inp.input_fingerprint:
        failed.append("fingerprint_mismatch")
    done = [s for s in spec.stages if stage_done(spec, s, (cp.state_table.get(s) or {}).get("status"))]
    unasserted = [s for s in done if s not in cp.asserted_stages]
    if unasserted:
        failed.append("unasserted_stages:" + ",".join(unasserted))
    missing = [k for k in cp.observed_effects if k not in inp.existing_effect_keys]
    if missing:
        failed.append("unknown_observed_effects:" + ",".join(sorted(missing)))
    if cp.version_boundary is not None and cp.version_boundary > inp.store_version:
        failed.append("version_boundary_ahead_of_store")
    if not cp.monotonic:
        failed.append("checkpoints_not_monotonic")
    return failed


def recovery_decide(inp: RecoveryInput) -> Decision:
    spec = inp.workflow
    if inp.reopened == "staged":  # a dry run reads nothing and is read by nothing (SPEC §10.3)
        return Decision("fresh", "staged", resume_from=spec.stages[0] if spec.stages else None)
    decision = _decide(inp)
    if inp.reopened == "goal_changed" and decision.outcome == "fresh":
        return replace(decision, reason_code="goal_changed")
    if inp.reopened == "rolled_back" and decision.outcome == "resume":
        return replace(decision, reason_code="rolled_back")
    return decision


def _decide(inp: RecoveryInput) -> Decision:
    spec = inp.workflow
    fp = inp.input_fingerprint

    # 1. Another run holds the intent, or an escalation of this fingerprint waits for a human.
    for other in inp.other_runs:
        if other.active and other.state != "escalated":
            return Decision("noop", "active_run_exists", prior_run=other.id)
    for other in inp.other_runs:
        if other.state == "escalated" and other.input_fingerprint == fp:
            return Decision("noop", "escalation_pending", prior_run=other.id)

    # 1b. The workflow's day budget is spent (SPEC §16): one escalation stands for the day, later triggers noop.
    if inp.day_budget_spent:
        return Decision("noop" if inp.day_escalation_stands else "escalated", "budget_exhausted")

    same_fp_cp = inp.latest_checkpoint_same_fingerprint
    effects = [e for e in inp.effects if e.stage in spec.stages]
    verified = [e for e in effects if e.status == "verified"]

    # 2. The work for this fingerprint is complete.
    done = _done_status(spec, same_fp_cp, effects)
    if first_not_done(spec, done) is None:
        reason = "verified_effect_same_fingerprint" if verified else "completed_same_fingerprint"
        prior = same_fp_cp.run_id if same_fp_cp else (verified[0].run_id if verified else None)
        return Decision("noop", reason, prior_run=prior, checkpoint=same_fp_cp.id if same_fp_cp else None,
                        stage_status=done)

    # 3. An effect happened (or may have) but is not verified: verify, never re-execute.
    unverified = [e for e in effects if e.status in UNVERIFIED]
    if unverified:
        usable = same_fp_cp if same_fp_cp is not None and not same_fp_cp.expired else None
        status = _done_status(spec, same_fp_cp, effects, verified_only=usable is None)
        assumed = dict(status)
        for e in unverified:
            assumed[e.stage] = "verified"
        for e in unverified:
            status[e.stage] = "succeeded"
        return Decision(
            "verify_only", "effect_unverified",
            resume_from=first_not_done(spec, assumed),
            verify_effects=tuple(e.key for e in unverified),
            prior_run=unverified[0].run_id,
            checkpoint=same_fp_cp.id if same_fp_cp else None,
            stage_status=status,
        )

    cp = inp.latest_checkpoint
    budget_spent = inp.failed_runs_since_progress >= spec.max_retries
    # Starting afresh keeps what the world already holds: verified effects of this fingerprint.
    world = _done_status(spec, None, effects)
    fresh = dict(resume_from=first_not_done(spec, world), stage_status=world)
    if cp is None:
        # 5. Nothing found (a failing first stage still escalates once the budget is spent).
        if budget_spent:
            return Decision("escalated", "retry_budget_exhausted", **fresh)
        return Decision("fresh", "no_checkpoint", **fresh)

    # 4. Compare with the latest checkpoint of the intent.
    base = dict(prior_run=cp.run_id, checkpoint=cp.id)
    if cp.expired:
        return Decision("fresh", "checkpoint_expired", **fresh, **base)
    if cp.policy_version != inp.policy_version:
        return Decision("fresh", "policy_changed", **fresh, **base)
    if cp.input_fingerprint != fp:
        return Decision("fresh", "input_changed", **fresh, **base)
    failed = _failed_assertions(inp, cp)
    if failed:
        return Decision("escalated", "checkpoint_inconsistent", failed_assertions=tuple(failed), **base)
    status = _done_status(spec, cp, effects)
    if budget_spent:
        return Decision("escalated", "retry_budget_exhausted", resume_from=first_not_done(spec, status),
                        stage_status=status, **base)
    if cp.env_fingerprint != inp.env_fingerprint:
        verified_idx = [i for i, s in enumerate(spec.stages) if s in spec.effect_stages and status.get(s) == "verified"]
        last = max(verified_idx, default=-1)
        reset = tuple(s for i, s in enumerate(spec.stages)
                      if i > last and s not in spec.effect_stages and s in status)
        for s in reset:
            del status[s]
        if reset:
            return Decision("resume", "env_changed_downgraded", resume_from=first_not_done(spec, status),
                            reset_stages=reset, stage_status=status, **base)
    return Decision("resume", "resume_incomplete_stage", resume_from=first_not_done(spec, status),
                    stage_status=status, **base)
