"""A reference model of the recovery decision, written from the text of SPEC §3.

It deliberately imports nothing from ``ledger.domain.recovery`` or ``ledger.services``: it is an observer
outside the product that writes down what an episode did (runs triggered, stage events accepted,
agents that died) and says, from the SPEC's rules alone, what the next decision must be.

What it keeps for one (workflow, intent):
- runs: fingerprint, policy, env, where the run is (active, failed, completed, noop, escalated, abandoned)
  and its view of the stages;
- effects: one per (fingerprint, effect stage) with its status;
- checkpoints: the server writes one whenever a stage passes (succeeded, skipped, verified), holding
  the run's stage view at that moment; its expiry is its time plus the workflow's TTL.
Fingerprints are opaque labels here (any change of inputs or policy is a new one).
The workflow's day (SPEC §16): what the accepted events cost since the episode began (an episode lasts
minutes: its day does not turn), its ``cost_usd_per_day`` and whether the day's one escalation stands.
Per-run budgets are not a rule of the decision (the episodes set none). Not modelled: approvals, executors,
goals, rollbacks, staged runs and agent-written checkpoints (the episodes do not produce them, so every
checkpoint passes its recovery assertions).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

PASSED = ("succeeded", "skipped", "verified")  # a stage event after which the server checkpoints
UNVERIFIED = ("attempted", "effective", "unknown")


@dataclass
class ModelRun:
    id: str
    fp: str
    policy: str
    env: str
    state: str  # active | failed | completed | noop | escalated | abandoned
    stages: dict[str, str] = field(default_factory=dict)  # stage -> latest status in this run
    ended_at: datetime | None = None
    retried_at: datetime | None = None
    lease_dead: bool = False  # its agent died and the lease has run out
    never_leased: bool = False  # queued for an agent, and nobody leased it in time: it never ran


@dataclass(frozen=True)
class ModelCheckpoint:
    fp: str
    policy: str
    env: str
    table: dict
    created_at: datetime
    expires_at: datetime


@dataclass(frozen=True)
class Expected:
    outcome: str
    reason_code: str
    resume_from: str | None = None
    verify_stages: tuple[str, ...] = ()
    stages: dict = field(default_factory=dict)  # the done stages the new run starts with


class ReferenceModel:
    def __init__(self, *, stages, effect_stages, max_retries: int, ttl_seconds: int,
                 cost_usd_per_day: Decimal | None = None):
        self.order = list(stages)
        self.effect_stages = set(effect_stages)
        self.max_retries = max_retries
        self.ttl = timedelta(seconds=ttl_seconds)
        self.runs: list[ModelRun] = []
        self.effects: dict[tuple[str, str], str] = {}  # (fp, stage) -> status
        self.checkpoints: list[ModelCheckpoint] = []
        self.day_budget, self.day_cost, self.day_escalated = cost_usd_per_day, Decimal(0), False

    # ------------------------------------------------------------ the words of SPEC §3

    def done(self, stage: str, status: str | None) -> bool:
        """Done means succeeded or skipped, or verified for an effect stage."""
        if stage in self.effect_stages:
            return status in ("verified", "skipped")
        return status in PASSED

    def first_not_done(self, status: dict) -> str | None:
        return next((s for s in self.order if not self.done(s, status.get(s))), None)

    def _done_in(self, table: dict) -> dict:
        return {s: table[s] for s in self.order if self.done(s, table.get(s))}

    def _verified_effects(self, fp: str) -> dict:
        return {stage: "verified" for (f, stage), status in self.effects.items() if f == fp and status == "verified"}

    def _latest_checkpoint(self, fp: str | None = None) -> ModelCheckpoint | None:
        found = [c for c in self.checkpoints if fp is None or c.fp == fp]
        return found[-1] if found else None

    def _failed_since_progress(self, fp: str) -> int:
        """Runs of this fingerprint that ended failed since the later of its latest checkpoint and retry."""
        moments = [r.retried_at for r in self.runs if r.fp == fp and r.retried_at]
        cp = self._latest_checkpoint(fp)
        if cp:
            moments.append(cp.created_at)
        since = max(moments, default=None)
        return sum(1 for r in self.runs if r.fp == fp and r.state == "failed" and not r.never_leased
                   and (since is None or r.ended_at > since))

    def decide(self, *, fp: str, policy: str, env: str, now: datetime, exclude: str | None = None) -> Expected:
        """The decision for a trigger at ``now`` (first, runs whose lease ran out are failed)."""
        for run in self.runs:
            if run.state == "active" and run.lease_dead and run.id != exclude:
                run.state, run.ended_at = "failed", now
        others = [r for r in self.runs if r.id != exclude]
        # 1. another run holds the intent; an escalation of this fingerprint waits for a human
        if any(r.state == "active" for r in others):
            return Expected("noop", "active_run_exists")
        if any(r.state == "escalated" and r.fp == fp for r in others):
            return Expected("noop", "escalation_pending")
        # then the day: spent, a trigger escalates once, later ones noop (a person's retry, ``exclude``, goes ahead)
        if exclude is None and self.day_budget is not None and self.day_cost >= self.day_budget:
            return Expected("noop" if self.day_escalated else "escalated", "budget_exhausted")
        same_cp = self._latest_checkpoint(fp)
        verified = self._verified_effects(fp)
        # 2. the work of this fingerprint is complete (checkpoint at any age + verified effects)
        done = {**(self._done_in(same_cp.table) if same_cp else {}), **verified}
        if self.first_not_done(done) is None:
            return Expected("noop", "verified_effect_same_fingerprint" if verified else "completed_same_fingerprint")
        # 3. an effect may have happened but is not verified: verify it, never re-execute
        unverified = tuple(s for s in self.order if self.effects.get((fp, s)) in UNVERIFIED)
        if unverified:
            if same_cp and same_cp.expires_at > now:
                base = self._done_in(same_cp.table)
            else:  # an expired checkpoint contributes only its verified effects
                base = {s: st for s, st in (same_cp.table if same_cp else {}).items()
                        if s in self.effect_stages and st == "verified"}
            start = {**base, **verified}
            once_verified = {**start, **{s: "verified" for s in unverified}}
            return Expected("verify_only", "effect_unverified", self.first_not_done(once_verified), unverified,
                            {**start, **{s: "succeeded" for s in unverified}})
        cp = self._latest_checkpoint()
        budget_spent = self._failed_since_progress(fp) >= self.max_retries
        afresh = dict(resume_from=self.first_not_done(verified), stages=verified)  # the world keeps verified effects
        # 5. nothing found (retries still count: a first stage that keeps failing escalates too)
        if cp is None:
            if budget_spent:
                return Expected("escalated", "retry_budget_exhausted")
            return Expected("fresh", "no_checkpoint", **afresh)
        # 4. compare with the latest checkpoint of the intent
        if cp.expires_at <= now:
            return Expected("fresh", "checkpoint_expired", **afresh)
        if cp.policy != policy:
            return Expected("fresh", "policy_changed", **afresh)
        if cp.fp != fp:
            return Expected("fresh", "input_changed", **afresh)
        status = {**self._done_in(cp.table), **verified}
        if budget_spent:
            return Expected("escalated", "retry_budget_exhausted", self.first_not_done(status))
        if cp.env != env:
            last = max((i for i, s in enumerate(self.order)
                        if s in self.effect_stages and status.get(s) == "verified"), default=-1)
            reset = [s for i, s in enumerate(self.order) if i > last and s not in self.effect_stages and s in status]
            if reset:
                kept = {s: st for s, st in status.items() if s not in reset}
                return Expected("resume", "env_changed_downgraded", self.first_not_done(kept), stages=kept)
        return Expected("resume", "resume_incomplete_stage", self.first_not_done(status), stages=status)

    # ------------------------------------------------------------ what the episode observed

    def run_decided(self, *, run_id: str, fp: str, policy: str, env: str, expected: Expected) -> ModelRun:
        """Record a new run as the model says it was decided (the episode checks the server agreed)."""
        run = ModelRun(run_id, fp, policy, env, state="active")
        self._apply(run, expected)
        if (expected.outcome, expected.reason_code) == ("escalated", "budget_exhausted"):
            self.day_escalated = True  # one escalation stands for the day
        self.runs.append(run)
        return run

    def retried(self, run: ModelRun, *, now: datetime) -> Expected:
        """On-call retry of an escalated run: the budget starts afresh and the same run is decided again."""
        run.retried_at = now
        expected = self.decide(fp=run.fp, policy=run.policy, env=run.env, now=now, exclude=run.id)
        self._apply(run, expected)
        return expected

    def abandoned(self, run: ModelRun) -> None:
        run.state = "abandoned"

    def lease_ran_out(self, run: ModelRun) -> None:
        run.lease_dead = True

    def queue_ran_out(self, run: ModelRun) -> None:
        """A queued run nobody leased in time: it fails ``not_leased`` and, never having run, spends no retry."""
        run.lease_dead = run.never_leased = True

    def _apply(self, run: ModelRun, expected: Expected) -> None:
        run.stages = dict(expected.stages)
        run.state = {"noop": "noop", "escalated": "escalated"}.get(expected.outcome, "active")

    def event(self, run: ModelRun, stage: str, kind: str, *, at: datetime, cost: Decimal = Decimal(0)) -> None:
        """An accepted stage event (API.md, event semantics); ``cost``: its usage's ``cost_usd``."""
        self.day_cost += cost
        key = (run.fp, stage)
        effect_stage = stage in self.effect_stages
        previous = run.stages.get(stage)
        run.stages[stage] = kind
        if effect_stage:
            if kind == "started":
                self.effects[key] = "attempted"
            elif kind == "succeeded":
                self.effects[key] = "effective"
            elif kind == "unknown":
                self.effects[key] = "unknown"
            elif kind == "verified":
                self.effects[key] = "verified"
            elif kind == "skipped" and self.effects.get(key) == "attempted":
                self.effects[key] = "failed"  # skipped after its start: it never happened
            elif kind == "failed":
                self.effects[key] = "failed"  # a definite failure, or checked and found absent
        if kind in PASSED:
            self.checkpoints.append(ModelCheckpoint(run.fp, run.policy, run.env, dict(run.stages), at, at + self.ttl))
            if self.first_not_done(run.stages) is None:
                run.state, run.ended_at = "completed", at
        elif kind == "failed" and previous == "started":  # failed while executing: the run fails
            run.state, run.ended_at = "failed", at
