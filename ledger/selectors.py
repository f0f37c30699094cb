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

    return sql.checkpoint_latest_read(workflow_id=run.workflow_id, intent=run.intent, staged=run.staged)


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
    runs = Run.objects.filter(staged=False)  # staged (dry) runs are left out of every figure
    events = LedgerEvent.objects.filter(run__staged=False)
    effects = Effect.objects.all()  # a staged run writes no effect
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

    runs = [({"state": r["state"]}, r["n"]) for r in Run.objects.filter(staged=False).values("state").annotate(n=Count("id"))]
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


def runs_filtered(*, user=None, workflow: str = "", state: str = "", intent: str = "", since=None):
    """``run_list`` narrowed by the runs page filters (workflow slug, state, intent substring, created since)."""
    runs = run_list(user=user)
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
    from django.db.models import OuterRef, Subquery

    last_reason = (LedgerEvent.objects.filter(run=OuterRef("pk"), kind="transition")
                   .order_by("-seq").values("reason_code")[:1])
    return runs.annotate(last_reason=Subquery(last_reason))


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
