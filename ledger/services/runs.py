"""Triggers and the recovery decision's record; lease expiry."""

from __future__ import annotations

import functools
import time
import uuid
from dataclasses import dataclass
from datetime import datetime

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from knowledge.selectors import store_version as knowledge_store_version
from ledger import selectors
from ledger.domain import recovery
from ledger.domain.attributes import KIND as ATTRIBUTES_SET
from ledger.domain.attributes import attributes_checked
from ledger.domain.usage import spend_day
from ledger.models import HOLDING_STATES, LEASED_STATES, Checkpoint, EffectKey, EventKind, Run, Trigger, Workflow
from ledger.schedules import SLOT_FORMAT
from ledger.services.spend import day_budget_input, day_querysets
from ledger.services.versions import goals_latest
from ledger.services.writer import RunWriter, input_fingerprint, lease_expired, lease_fail, run_lock, workflow_spec
from ledger.store import store
from ledger.store.reads import Reads
from ledger.traces.context import traceparent_checked
from stateboard.canonical import canonical_json
from stateboard.errors import Conflict, Invalid

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


def _failed_runs(*, workflow_id: int, intent: str, fingerprint: str):
    """(state, ended_at, retried_at, ended_reason) of the runs of this intent and fingerprint that failed or
    were retried (partial index ``run_failed_or_retried``). A queued run no agent leased never ran: it does
    not count."""
    failed = Q(state="failed") & ~Q(ended_reason="not_leased")
    return (Run.objects.filter(failed | Q(retried_at__isnull=False), workflow_id=workflow_id, intent=intent,
                               input_fingerprint=fingerprint, staged=False)
            .values_list("state", "ended_at", "retried_at", "ended_reason"))


def _failed_runs_since_progress(rows: list[tuple], checkpoint: Checkpoint | None,
                                retried_at: datetime | None = None) -> int:
    """Of ``_failed_runs`` rows, those that ended failed since the later of the latest checkpoint and the
    latest on-call retry (``retried_at``: one being made). A run that failed ``not_leased`` never ran
    (retried, then nobody took it): it does not count (SPEC §3)."""
    moments = [retried for _, _, retried, _ in rows if retried is not None]
    if retried_at is not None:
        moments.append(retried_at)
    if checkpoint is not None:
        moments.append(checkpoint.created_at)
    since = max(moments, default=None)
    return sum(1 for state, ended, _, reason in rows if state == "failed" and reason != "not_leased"
               and (since is None or (ended and ended > since)))


def _recovery_querysets(*, workflow_id: int, intent: str, fingerprint: str, holding_locked: int,
                        day: str | None = None) -> list:
    real = selectors.checkpoints_trusted().filter(workflow_id=workflow_id, intent=intent, staged=False)
    querysets = [real.order_by("-id")[:2], real.filter(input_fingerprint=fingerprint).order_by("-id")[:1],
                 selectors.effects_of(workflow_id=workflow_id, intent=intent, fingerprint=fingerprint)
                 .values_list("idempotency_key", "stage", "status", "run_id"),
                 _failed_runs(workflow_id=workflow_id, intent=intent, fingerprint=fingerprint)]
    if day is not None:  # SPEC §16: the workflow's day, kept by the appends, and whether its escalation stands
        querysets += day_querysets(workflow_id=workflow_id, day=day)
    return querysets if not holding_locked else [_holding(workflow_id=workflow_id, intent=intent, lock=True), *querysets]


_RECOVERY_READS = Reads(functools.partial(_recovery_querysets, holding_locked=False), workflow_id=int, intent=str,
                        fingerprint=str)
_TRIGGER_READS = Reads(functools.partial(_recovery_querysets, holding_locked=True), workflow_id=int, intent=str,
                       fingerprint=str)
_TRIGGER_DAY_READS = Reads(functools.partial(_recovery_querysets, holding_locked=True), workflow_id=int, intent=str,
                           fingerprint=str, day=str)
_GOAL_READ = Reads(lambda *, intent, slug: [goals_latest(intent=intent, workflow__slug=slug)], intent=str, slug=str)


@dataclass(frozen=True)
class RecoveryReads:
    """What a decision reads of (workflow, intent, fingerprint) besides the holding runs."""
    latest_two: list[Checkpoint]
    same_fingerprint: Checkpoint | None
    effect_rows: list[tuple]
    failed_rows: list[tuple]
    day_micro_usd: int = 0  # the workflow's cost today (read only with a day)
    day_escalated: bool = False  # its day budget's escalation stands


def recovery_reads(*, workflow: Workflow, intent: str, fingerprint: str, holding_locked: bool = False,
                   day: str | None = None):
    """L2/L3 of (workflow, intent) as a decision reads them, in one round trip: (the intent's holding runs,
    locked, when ``holding_locked``; else None) and ``RecoveryReads``. Staged runs are invisible here: their
    checkpoints, failed runs and holding never count (they write no effects). ``day`` (a trigger's, with
    ``holding_locked``): the workflow's spend and budget escalation of that UTC day too, in the same trip."""
    values = dict(workflow_id=workflow.id, intent=intent, fingerprint=fingerprint)
    if day is not None:
        rows = store().reads(_TRIGGER_DAY_READS, **values, day=day)
    else:
        rows = store().reads(_TRIGGER_READS if holding_locked else _RECOVERY_READS, **values)
    holding = _with_workflow(rows.pop(0), workflow) if holding_locked else None
    latest_two, same_fp, effect_rows, failed_rows, *day_rows = rows
    spent, escalated = day_rows or ([], [])
    return holding, RecoveryReads(latest_two, same_fp[0] if same_fp else None, effect_rows, failed_rows,
                                  sum(spent), bool(escalated))


def recovery_input_gather(*, workflow: Workflow, intent: str, fingerprint: str, policy_version: str,
                          env_fingerprint: str, others: list[Run], now: datetime,
                          reopened: str = "", retried_at: datetime | None = None,
                          reads: RecoveryReads | None = None) -> tuple[recovery.RecoveryInput, dict]:
    """The plain data the pure decision needs, from ``recovery_reads`` (read here unless given), and one more
    round trip only when the latest checkpoint observed effects. ``retried_at``: an on-call retry at that
    moment (earlier failures no longer count)."""
    if reads is None:
        _, reads = recovery_reads(workflow=workflow, intent=intent, fingerprint=fingerprint)
    latest_two, same_fp = reads.latest_two, reads.same_fingerprint
    latest = latest_two[0] if latest_two else None
    effects = [recovery.EffectInfo(key=key, stage=stage, status=status, run_id=str(run_id))
               for key, stage, status, run_id in reads.effect_rows]
    failed_count = _failed_runs_since_progress(reads.failed_rows, same_fp, retried_at)
    existing_keys: frozenset[str] = frozenset()
    store_version = 0
    if latest is not None and latest.input_fingerprint == fingerprint:
        observed = (latest.payload or {}).get("observed_effects") or []
        keys = [k for k in observed if isinstance(k, str)]
        if keys:
            existing_keys = frozenset(EffectKey.objects.filter(idempotency_key__in=keys)  # (unpartitioned)
                                      .values_list("idempotency_key", flat=True))
        if latest.version_boundary is not None:
            store_version = knowledge_store_version()
    other_runs = [
        recovery.OtherRun(id=str(r.id), state=r.state, input_fingerprint=r.input_fingerprint,
                          active=r.state in HOLDING_STATES)
        for r in others if not r.staged
    ]
    inp = recovery.RecoveryInput(
        workflow=workflow_spec(workflow), input_fingerprint=fingerprint, policy_version=policy_version,
        env_fingerprint=env_fingerprint, other_runs=other_runs,
        latest_checkpoint=_checkpoint_info(latest, latest_two[1] if len(latest_two) > 1 else None, now),
        latest_checkpoint_same_fingerprint=_checkpoint_info(same_fp, None, now),
        effects=effects, failed_runs_since_progress=failed_count,
        existing_effect_keys=existing_keys, store_version=store_version, reopened=reopened,
    )
    context = {"checkpoints": {c.id: c for c in (latest, same_fp) if c is not None}, "retry_count": failed_count}
    return inp, context


def _holding(*, workflow_id: int, intent: str, lock: bool, exclude=None):
    runs = selectors.intent_holding_runs(workflow=workflow_id, intent=intent).order_by("id")
    if exclude is not None:
        runs = runs.exclude(id=exclude)
    return runs.select_for_update() if lock else runs


def _with_workflow(runs: list[Run], workflow: Workflow) -> list[Run]:
    for run in runs:
        run.workflow = workflow
    return runs


def holding_runs(*, workflow: Workflow, intent: str, lock: bool = False, exclude=None) -> list[Run]:
    """``selectors.intent_holding_runs`` as a trigger reads them (locked with ``lock``), with their workflow."""
    return _with_workflow(list(_holding(workflow_id=workflow.id, intent=intent, lock=lock, exclude=exclude)), workflow)


def dead_leases_expire(*, workflow: Workflow, intent: str, now: datetime, exclude=None,
                       runs: list[Run] | None = None) -> list[Run]:
    """Lock the intent's holding/escalated runs (or take ``runs``, read so already); move those whose
    lease expired (or that were queued past their time) to ``failed``."""
    if runs is None:
        runs = holding_runs(workflow=workflow, intent=intent, lock=True, exclude=exclude)
    alive = []
    for run in runs:
        if lease_expired(run, now):
            writer = RunWriter(run, "system", now)
            lease_fail(writer)
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


def decision_apply(writer: RunWriter, inp: recovery.RecoveryInput, context: dict, *, from_state: str,
                   queued: bool = False) -> recovery.Decision:
    """Decide and record; a run to work on is handed out (``queued``: queued for any agent, as a run
    decided again by a goal change or a rollback is, SPEC §10)."""
    decision = recovery.recovery_decide(inp)
    run = writer.run
    effects_by_stage = {e.stage: e for e in inp.effects if e.status not in ("failed", *recovery.UNDONE)}
    run.stage_states = _initial_stage_states(decision, context["checkpoints"], effects_by_stage)
    run.decision = {**decision.as_dict(), "retry_count": context["retry_count"],
                    "max_retries": inp.workflow.max_retries}
    run.decided_at = writer.now
    run.current_stage = decision.resume_from or ""
    nothing_found = decision.reason_code in ("no_checkpoint", "staged")
    if from_state in ("captured", "escalated"):
        writer.transition("restore", cause="retried" if from_state == "escalated" else "decided")
    if not nothing_found:
        writer.transition("compare", cause="decided")
    writer.emit(EventKind.DECIDED, reason_code=decision.reason_code, data=run.decision)
    writer.transition(decision.outcome, decision.reason_code, cause="decided")
    if decision.outcome in ("fresh", "resume", "verify_only"):
        writer.queue() if queued else writer.hand_out()
    return decision


_UNREAD = object()


def _trigger_key_run(workflow_slug: str, *, trigger_key: str, intent: str, inputs, trigger: str,
                     staged: bool, existing=_UNREAD) -> Run | None:
    """The run (with its workflow, one read) this trigger key already made if it is the same trigger (same
    intent and inputs, and the same kind: staged or real), None if the key is unused; refused if it was
    used otherwise. ``existing``: that run (or None) already read, with its workflow."""
    if existing is _UNREAD:
        existing = store().run_by_trigger_key(workflow_slug, trigger_key)
    if existing is not None and existing.intent == intent and existing.staged == staged \
            and canonical_json(existing.inputs) == canonical_json(inputs):
        return existing
    if trigger_key.startswith("schedule:") and trigger != Trigger.SCHEDULE:
        raise Invalid("reserved_trigger_key", "Trigger keys beginning 'schedule:' belong to schedule ticks; "
                                              "only a duplicate of the tick's run is accepted.")
    if existing is not None:
        raise Conflict("trigger_key_mismatch",
                       f"trigger_key {trigger_key!r} was already used with another intent, other inputs "
                       "or for the other kind of run (staged or real).",
                       run=str(existing.id))
    return None


def run_trigger(*, workflow_slug: str, inputs, intent: str | None = None, trigger: str = Trigger.API,
                trigger_key: str | None = None, env_fingerprint: str = "", actor: str = "system",
                staged: bool = False, arrived: float | None = None, attributes=None,
                traceparent: str = "") -> tuple[Run, bool]:
    """Trigger a run: dedupe by trigger key (one read, before any transaction or lock), lock the intent,
    expire dead leases, decide, record. Returns (run, created). Triggers of different intents of one
    workflow never wait for each other. A staged run (SPEC §10.3) reads and expires nothing: its
    decision is always fresh / staged. ``arrived``: when the request came (``time.monotonic()``): a new
    run's decision latency (SPEC §7) is recorded once its decision has committed. ``attributes`` (SPEC §15,
    422 ``invalid_attributes``) label a new run; a duplicate answers its run with the attributes it has.
    ``traceparent`` (SPEC §16, the trigger request's W3C header) is kept on a new run when valid, ignored
    otherwise: the run's trace continues the caller's."""
    staged = bool(staged)
    attributes = attributes_checked(attributes)
    if trigger_key and trigger in Trigger.values:  # otherwise refused below, in the order of its checks
        existing = _trigger_key_run(workflow_slug, trigger_key=trigger_key, intent=intent or workflow_slug,
                                    inputs=inputs, trigger=trigger, staged=staged)
        if existing is not None:
            return existing, False
    try:
        with transaction.atomic():
            run, created = _run_trigger_locked(workflow_slug=workflow_slug, inputs=inputs, intent=intent,
                                               trigger=trigger, trigger_key=trigger_key,
                                               env_fingerprint=env_fingerprint, actor=actor, staged=staged,
                                               attributes=attributes,
                                               traceparent=traceparent_checked(traceparent))
    except _InsertRefused as refused:
        # The intent lock serialises triggers of an intent; these are the database's backstops: the key
        # taken meanwhile by a trigger of another intent, or another active run of this intent.
        existing = refused.keyed and _trigger_key_run(refused.workflow_slug, trigger_key=refused.trigger_key,
                                                      intent=refused.intent, inputs=inputs, trigger=trigger,
                                                      staged=staged)  # mismatch if another took it
        if existing:
            return existing, False
        raise Conflict("active_run_exists", "Another run of this intent became active; trigger again.")
    if created and arrived is not None:
        transaction.on_commit(functools.partial(_decision_latency_record, run, arrived), robust=True)
    return run, created


def _decision_latency_record(run: Run, arrived: float) -> None:
    store().decision_latency_write(run, (time.monotonic() - arrived) * 1000)


class _InsertRefused(Exception):
    """The new run's insert hit a unique constraint; its transaction is rolled back before the lookup."""

    def __init__(self, *, workflow_slug: str, intent: str, trigger_key: str, keyed: bool):
        super().__init__(trigger_key)
        self.workflow_slug, self.intent, self.trigger_key, self.keyed = workflow_slug, intent, trigger_key, keyed


def workflow_active_require(workflow: Workflow) -> None:
    """An archived workflow takes no new work (SPEC §12.2): its triggers (a duplicate trigger key still
    answers its run), ticks, retries and rollbacks are 409 ``workflow_archived``; runs holding an intent finish."""
    if workflow.archived_at is not None:
        raise Conflict("workflow_archived", f"Workflow {workflow.slug!r} is archived; a workflows file naming it "
                                            "restores it.")


def _run_trigger_locked(*, workflow_slug: str, inputs, intent: str | None, trigger: str, trigger_key: str | None,
                        env_fingerprint: str, actor: str, staged: bool, attributes: dict,
                        traceparent: str = "") -> tuple[Run, bool]:
    if trigger not in Trigger.values:
        raise Invalid("invalid_trigger", f"trigger must be one of {', '.join(Trigger.values)}.")
    intent = intent or workflow_slug
    workflow, rows = store().workflow_read_intent_locked(  # the goal read under ``intent_lock``'s lock
        workflow_slug, intent, _GOAL_READ, intent=intent, slug=workflow_slug)
    if workflow is None:
        raise Invalid("unknown_workflow", f"No workflow with slug {workflow_slug!r}.")
    keyed = bool(trigger_key)
    trigger_key = trigger_key or f"{trigger}:{uuid.uuid4()}"
    if keyed:
        keyed_run = store().run_by_trigger_key(workflow.slug, trigger_key)
        if keyed_run is not None:
            keyed_run.workflow = workflow
        existing = _trigger_key_run(workflow.slug, trigger_key=trigger_key, intent=intent, inputs=inputs,
                                    trigger=trigger, staged=staged, existing=keyed_run)
        if existing is not None:
            return existing, False
    workflow_active_require(workflow)

    now = timezone.now()
    goal_version = rows[0][0] if rows[0] else None
    fingerprint = input_fingerprint(workflow_slug=workflow.slug, intent=intent, inputs=inputs,
                                    policy_version=workflow.policy_version, goal_version=goal_version)
    if staged:
        inp = recovery.RecoveryInput(workflow=workflow_spec(workflow), input_fingerprint=fingerprint,
                                     policy_version=workflow.policy_version, env_fingerprint=env_fingerprint,
                                     reopened="staged")
        context = {"checkpoints": {}, "retry_count": 0}
    else:
        day = spend_day(now) if "cost_usd_per_day" in (workflow.budget or {}) else None
        holding, reads = recovery_reads(workflow=workflow, intent=intent, fingerprint=fingerprint, holding_locked=True,
                                        day=day)
        others = dead_leases_expire(workflow=workflow, intent=intent, now=now, runs=holding)
        day_read = dict(day=day, day_micro_usd=reads.day_micro_usd, escalated=reads.day_escalated)
        if len(others) < len(holding):  # a lease lapsed: its run failed just now, so read its failure too
            reads = None
        inp, context = recovery_input_gather(workflow=workflow, intent=intent, fingerprint=fingerprint,
                                             policy_version=workflow.policy_version, env_fingerprint=env_fingerprint,
                                             others=others, now=now, reads=reads)
    run = Run(workflow=workflow, intent=intent, trigger=trigger, trigger_key=trigger_key, inputs=inputs,
              input_fingerprint=fingerprint, policy_version=workflow.policy_version,
              env_fingerprint=env_fingerprint, state="captured", triggered_by=actor, created_at=now,
              staged=bool(staged), goal_version=goal_version, attributes=attributes, traceparent=traceparent)
    if not staged:
        inp = day_budget_input(inp, budget=workflow.budget, run=run, now=now, **day_read)
    writer = RunWriter(run, actor, now)
    if attributes:  # the ledger holds them (export and import rebuild them from its events), in the run's insert
        writer.emit(ATTRIBUTES_SET, data={"attributes": attributes})
    decision_apply(writer, inp, context, from_state="captured")
    try:
        writer.flush(insert=True)
    except IntegrityError:
        raise _InsertRefused(workflow_slug=workflow.slug, intent=intent, trigger_key=trigger_key, keyed=keyed)
    return run, True


def runs_expire_leases(*, now: datetime | None = None) -> int:
    """Sweep: move runs whose agent went silent past the lease, and queued runs no agent leased in
    time (``not_leased``), to ``failed``; returns how many. A run in ``compensate`` has no lease
    expiry (SPEC §9.1): an approved compensation no agent leased in time is queued again, since the
    undo is still owed. Safe to run twice."""
    now = now or timezone.now()
    expired = 0
    queue_lapsed = Q(queued_until__lte=now)
    candidates = (Run.objects.filter(Q(state__in=LEASED_STATES) & (Q(lease_expires_at__lte=now) | queue_lapsed)
                                     | Q(state="compensate") & queue_lapsed)
                  .values_list("id", flat=True)[:1000])
    for run_id in candidates:
        with transaction.atomic():
            run = run_lock(run_id)
            writer = RunWriter(run, "system", now)
            if lease_expired(run, now):
                lease_fail(writer)
                expired += 1
            elif run.state == "compensate" and run.queued_until is not None and run.queued_until <= now:
                writer.queue()
            else:
                continue  # taken or renewed meanwhile
            writer.flush()
    return expired


def schedule_tick(*, workflow_slug: str, slot: str) -> Run | None:
    """The run of one schedule tick T (``YYYY-MM-DDTHH:MM:SSZ``, from beat): trigger key ``schedule:<T>``,
    the workflow's ``schedule_intent`` and ``schedule_inputs`` merged under ``{"slot": T}``. A tick
    delivered twice (two schedulers, a redelivery) is the same run."""
    datetime.strptime(slot, SLOT_FORMAT)  # a malformed slot is a bug in the sender, never a run
    workflow = Workflow.objects.filter(slug=workflow_slug).first()
    if workflow is None:
        return None
    try:
        run, _ = run_trigger(workflow_slug=workflow.slug, inputs={**(workflow.schedule_inputs or {}), "slot": slot},
                             intent=workflow.schedule_intent or workflow.slug, trigger=Trigger.SCHEDULE,
                             trigger_key=f"schedule:{slot}", actor="system")
    except Conflict as exc:  # the tick already has its run (its inputs changed since), or its workflow is archived
        if exc.code == "workflow_archived":
            return None
        if exc.code != "trigger_key_mismatch":
            raise
        run = Run.objects.get(workflow=workflow, trigger_key=f"schedule:{slot}")
    return run
