"""Reads of the ledger, shared by pages, the API and the knowledge app."""

from django.db.models import Min

from ledger.models import Checkpoint, LedgerEvent


def event_is_verified(*, event_id: int) -> bool:
    """True when the ledger event exists and is a ``verified`` event (a claim may rest on it)."""
    return LedgerEvent.objects.filter(id=event_id, kind="verified").exists()


def oldest_live_version_boundary(*, now) -> int | None:
    """Smallest ``version_boundary`` among checkpoints not yet expired (None: no such checkpoint).

    Checkpoints without a boundary hold no knowledge snapshot and cannot resurrect anything.
    """
    return (Checkpoint.objects.filter(expires_at__gt=now, version_boundary__isnull=False)
            .aggregate(m=Min("version_boundary"))["m"])


def run_list(*, user=None):
    """Runs visible to ``user`` (every signed-in role sees every run), newest first."""
    from ledger.models import Run

    return Run.objects.select_related("workflow").order_by("-created_at", "-id")


def run_events(*, run):
    return LedgerEvent.objects.filter(run=run).order_by("seq")


def run_detail(*, run_id, user=None):
    from django.db.models import Prefetch

    from ledger.models import Approval, Effect

    return (run_list(user=user)
            .prefetch_related(Prefetch("effects", queryset=Effect.objects.order_by("claimed_seq")),
                              Prefetch("approvals", queryset=Approval.objects.order_by("-created_at")))
            .get(id=run_id))


def checkpoint_latest(*, run):
    """The latest checkpoint of the run's intent (one indexed read, on the agents' hot path)."""
    from ledger import sql

    return sql.checkpoint_latest_read(workflow_id=run.workflow_id, intent=run.intent)


def approval_list(*, user=None, status: str | None = None):
    from ledger.models import Approval

    approvals = Approval.objects.select_related("run", "run__workflow").order_by("-created_at", "id")
    return approvals.filter(status=status) if status else approvals


def effect_list(*, user=None):
    from ledger.models import Effect

    return Effect.objects.select_related("workflow").order_by("-created_at", "id")


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def metrics(*, workflow_slug: str | None = None, since=None, now=None) -> dict:
    """SPEC §7, computed from the ledger and its projections."""
    from django.db.models import Count
    from django.utils import timezone

    from ledger.models import Approval, Effect, Run

    now = now or timezone.now()
    runs = Run.objects.all()
    events = LedgerEvent.objects.all()
    effects = Effect.objects.all()
    if workflow_slug:
        runs, effects = runs.filter(workflow__slug=workflow_slug), effects.filter(workflow__slug=workflow_slug)
        events = events.filter(run__workflow__slug=workflow_slug)
    if since:
        runs, effects, events = runs.filter(created_at__gte=since), effects.filter(created_at__gte=since), \
            events.filter(at__gte=since)
    # An effect executed twice: one idempotency key with more than one executed outcome in the ledger.
    executed = (events.filter(kind__in=("succeeded", "unknown"), idempotency_key__gt="")
                .values("idempotency_key").annotate(n=Count("id")))
    effect_total = effects.count()
    duplicated = sum(1 for row in executed if row["n"] > 1)
    completed = runs.filter(state="completed")
    completed_total = completed.count()
    unverified_completed = (completed.filter(effects__status__in=("attempted", "effective", "unknown"))
                            .distinct().count())
    decision_latency = [
        (r["decided_at"] - r["created_at"]).total_seconds() * 1000
        for r in runs.filter(decided_at__isnull=False).values("decided_at", "created_at")[:10000]
    ]
    decisions = runs.exclude(decision={}).values("decision__outcome").annotate(n=Count("id"))
    open_approvals = Approval.objects.filter(status="pending")
    if workflow_slug:
        open_approvals = open_approvals.filter(run__workflow__slug=workflow_slug)
    ages = [(now - a).total_seconds() for a in open_approvals.values_list("created_at", flat=True)]
    from knowledge.selectors import knowledge_metrics

    result = {
        "workflow": workflow_slug,
        "since": since.isoformat() if since else None,
        "runs": runs.count(),
        "effects": effect_total,
        "duplicate_side_effect_rate": (duplicated / effect_total) if effect_total else 0.0,
        "duplicate_side_effects": duplicated,
        "unverified_completion_rate": (unverified_completed / completed_total) if completed_total else 0.0,
        "unverified_completions": unverified_completed,
        "recovery_decisions": {row["decision__outcome"]: row["n"] for row in decisions},
        "p95_trigger_to_decision_ms": _percentile(decision_latency, 0.95),
        "open_approvals": len(ages),
        "open_approvals_max_age_seconds": max(ages) if ages else 0,
        "escalated_runs": runs.filter(state="escalated").count(),
        "failed_runs": runs.filter(state="failed").count(),
    }
    result.update(knowledge_metrics(since=since))
    return result


def prometheus_samples():
    from django.db.models import Count

    from ledger.models import Approval, Effect, Run

    runs = [({"state": r["state"]}, r["n"]) for r in Run.objects.values("state").annotate(n=Count("id"))]
    effects = [({"status": r["status"]}, r["n"]) for r in Effect.objects.values("status").annotate(n=Count("id"))]
    m = metrics()
    return [
        ("stateboard_runs", "Runs by state.", "gauge", runs),
        ("stateboard_effects", "Effects by status.", "gauge", effects),
        ("stateboard_open_approvals", "Pending approval requests.", "gauge",
         [({}, Approval.objects.filter(status="pending").count())]),
        ("stateboard_duplicate_side_effects", "Idempotency keys executed more than once.", "gauge",
         [({}, m["duplicate_side_effects"])]),
        ("stateboard_unverified_completions", "Runs completed with an unverified effect.", "gauge",
         [({}, m["unverified_completions"])]),
        ("stateboard_write_gate_rejection_rate", "Share of claim proposals the write gate rejected.", "gauge",
         [({}, m.get("write_gate_rejection_rate", 0.0))]),
    ]


def dashboard_summary(*, user=None) -> dict:
    from django.db.models import Count

    from ledger.models import Approval, Run

    return {
        "recent_runs": list(run_list(user=user)[:20]),
        "state_counts": dict(Run.objects.values_list("state").annotate(n=Count("id")).values_list("state", "n")),
        "pending_approvals": Approval.objects.filter(status="pending").count(),
    }


# ---------------------------------------------------------------- pages (added with the HTML views)

ONCALL_STATES = ("escalated", "compensate", "failed")


def runs_filtered(*, user=None, workflow: str = "", state: str = "", intent: str = "", since=None, q: str = ""):
    """``run_list`` narrowed by the runs page filters (workflow slug, state, intent substring, created since,
    ``q``: id, id prefix or intent)."""
    runs = runs_search(run_list(user=user), q)
    if workflow:
        runs = runs.filter(workflow__slug=workflow)
    if state:
        runs = runs.filter(state=state)
    if intent:
        runs = runs.filter(intent__icontains=intent)
    if since:
        runs = runs.filter(created_at__gte=since)
    return runs


def oncall_runs(*, user=None, workflow: str = "", state: str = "", intent: str = "", since=None):
    """Runs that need on-call attention: escalated, awaiting compensation, or failed.

    ``last_reason`` is the reason code of the run's latest transition (why it is where it is),
    read in the same query.
    """
    runs = runs_filtered(user=user, workflow=workflow, state=state, intent=intent, since=since)
    return _with_last_reason(runs.filter(state__in=ONCALL_STATES))


def oncall_run(*, run_id, user=None):
    """One run as an on-call row (whatever its state now, e.g. right after a retry)."""
    return _with_last_reason(run_list(user=user)).get(id=run_id)


def _with_last_reason(runs):
    """Annotate ``last_reason`` and ``compensable``.

    ``compensable`` mirrors ``services.compensation_plan(run) is not None`` in the same query (the
    on-call page offers Compensate only then); tests/test_dash_oncall.py checks they agree.
    """
    from django.db.models import Exists, OuterRef, Subquery

    from ledger.models import Effect

    last_reason = (LedgerEvent.objects.filter(run=OuterRef("pk"), kind="transition")
                   .order_by("-seq").values("reason_code")[:1])
    undoable = Effect.objects.filter(workflow_id=OuterRef("workflow_id"), intent=OuterRef("intent"),
                                     input_fingerprint=OuterRef("input_fingerprint")).exclude(
        status__in=("failed", "compensated"))
    return runs.annotate(last_reason=Subquery(last_reason),
                         has_undoable=Exists(undoable), has_unreferenced=Exists(undoable.filter(reference="")))


def workflow_list(*, user=None):
    from ledger.models import Workflow

    return Workflow.objects.order_by("slug")


def approvals_pending(*, user=None):
    """Pending requests, oldest deadline first (what needs a decision soonest)."""
    return approval_list(user=user, status="pending").order_by("deadline", "id")


def approval_get(*, approval_id, user=None):
    return approval_list(user=user).get(id=approval_id)


def run_audit_entries(*, run):
    """Audited human actions on the run (refused attempts included), newest first."""
    from ledger.models import AuditEntry

    return AuditEntry.objects.filter(run=run).order_by("-at", "-id")


# ---------------------------------------------------------------- run page, compare, inbox (second pass)

def run_events_page(*, run, before: int | None = None, from_seq: int | None = None, limit: int = 50) -> list:
    """Newest events first: a page of ``limit`` before ``before``, or (live refresh) all from ``from_seq`` on."""
    events = LedgerEvent.objects.filter(run=run).order_by("-seq")
    if before is not None:
        events = events.filter(seq__lt=before)
    if from_seq is not None:
        return list(events.filter(seq__gte=from_seq)[:max(limit, 500)])
    return list(events[:limit])


def run_transitions(*, run) -> list[tuple[int, dict]]:
    """(seq, data) of the run's transition events, in order: the path the drawing shows."""
    rows = LedgerEvent.objects.filter(run=run, kind="transition").order_by("seq").values_list("seq", "data")
    return [(seq, data if isinstance(data, dict) else {}) for seq, data in rows]


def stage_times(*, run) -> dict[str, dict]:
    """Per stage: first ``started`` and last outcome moment, from the ledger (one grouped read)."""
    from django.db.models import Max, Q

    from ledger.models import STAGE_OUTCOME_KINDS

    rows = (LedgerEvent.objects.filter(run=run, kind__in=STAGE_OUTCOME_KINDS).exclude(stage="")
            .values("stage").annotate(start=Min("at", filter=Q(kind="started")), end=Max("at")))
    return {r["stage"]: {"start": r["start"], "end": r["end"]} for r in rows}


def intent_attempts(*, run, limit: int = 50) -> list:
    """Every run of the same workflow and intent, oldest first (the attempts of this intent)."""
    from ledger.models import Run

    return list(Run.objects.filter(workflow_id=run.workflow_id, intent=run.intent)
                .only("id", "state", "decision", "created_at", "ended_at", "input_fingerprint", "workflow_id",
                      "intent").order_by("created_at", "id")[:limit])


def run_by_prefix(*, prefix: str, user=None) -> list:
    """Runs whose id (hex digits, hyphens ignored) starts with ``prefix``; at most two (unique or not)."""
    return list(runs_filtered(user=user, q=prefix).values_list("id", flat=True)[:2])


def _id_hex():
    from django.db.models import CharField, Value
    from django.db.models.functions import Cast, Lower, Replace

    return Lower(Replace(Cast("id", CharField()), Value("-"), Value("")))


def runs_search(runs, q: str):
    """``?q=``: a run id or id prefix (≥ 4 hex digits), else a substring of the intent."""
    import re

    from django.db.models import Q

    q = (q or "").strip()
    if not q:
        return runs
    hex_q = q.replace("-", "").lower()
    if re.fullmatch(r"[0-9a-f]{4,32}", hex_q):
        return runs.annotate(id_hex=_id_hex()).filter(Q(id_hex__startswith=hex_q) | Q(intent__icontains=q))
    return runs.filter(intent__icontains=q)


def runs_by_ids(*, ids, user=None) -> dict:
    from django.db.models import Prefetch

    from ledger.models import Effect

    runs = (run_list(user=user).filter(id__in=ids)
            .prefetch_related(Prefetch("effects", queryset=Effect.objects.order_by("claimed_seq"))))
    return {str(r.id): r for r in runs}


def checkpoints_of_runs(*, run_ids) -> dict:
    """The latest checkpoint each run saved, by run id."""
    latest = {}
    for cp in Checkpoint.objects.filter(run_id__in=run_ids).order_by("run_id", "-id"):
        latest.setdefault(str(cp.run_id), cp)
    return latest


def approvals_decided(*, user=None, status: str = "", kind: str = "", workflow: str = ""):
    """Decided requests (approved, rejected, expired), newest decision first, narrowed by the filters."""
    approvals = approval_list(user=user).exclude(status="pending")
    if status:
        approvals = approvals.filter(status=status)
    if kind:
        approvals = approvals.filter(kind=kind)
    if workflow:
        approvals = approvals.filter(run__workflow__slug=workflow)
    return approvals.order_by("-decided_at", "-created_at")


def approval_packs(*, approvals) -> dict:
    """Per approval id: the run's verified effects and evidence, and the last completed run of the intent
    before it (to say what changed). Three reads whatever the number of requests."""
    from ledger.models import Effect, Run

    run_ids = {a.run_id for a in approvals}
    if not run_ids:
        return {}
    effects: dict = {}
    for effect in Effect.objects.filter(run_id__in=run_ids, status="verified").order_by("claimed_seq"):
        effects.setdefault(effect.run_id, []).append(effect)
    evidence: dict = {}
    for event in (LedgerEvent.objects.filter(run_id__in=run_ids, kind="verified").exclude(evidence=[])
                  .only("run_id", "seq", "stage", "evidence").order_by("seq")):
        evidence.setdefault(event.run_id, []).append(event)
    runs = {a.run_id: a.run for a in approvals}
    previous = (Run.objects.filter(workflow_id__in={r.workflow_id for r in runs.values()},
                                   intent__in={r.intent for r in runs.values()}, state="completed")
                .exclude(id__in=run_ids).only("id", "workflow_id", "intent", "inputs", "created_at")
                .order_by("-created_at"))
    last_verified: dict = {}
    for prior in previous[:1000]:
        last_verified.setdefault((prior.workflow_id, prior.intent), []).append(prior)
    packs = {}
    for approval in approvals:
        run = approval.run
        prior = next((p for p in last_verified.get((run.workflow_id, run.intent), [])
                      if p.created_at < run.created_at), None)
        packs[approval.id] = {"effects": effects.get(run.id, []), "evidence": evidence.get(run.id, []),
                              "previous": prior}
    return packs


def policy_history(*, workflow, limit: int = 50):
    from ledger.models import AuditEntry

    return AuditEntry.objects.filter(action="policy_bump", target=workflow.slug).order_by("-at", "-id")[:limit]
