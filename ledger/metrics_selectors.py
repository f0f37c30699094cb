"""SPEC §7's figures read from the ledger: the metrics as JSON, the samples of ``/metrics`` (Prometheus
text) and the latest replay_eval's accuracy."""

from decimal import Decimal

from django.db.models import Count
from django.utils import timezone

from knowledge.selectors import knowledge_metrics
from ledger.domain.alerts import OPEN_STATES
from ledger.domain.effects import EXECUTION_KINDS, UNVERIFIED, first_repeat
from ledger.domain.machine import ONCALL_STATES
from ledger.models import Alert, Approval, Effect, LedgerEvent, ReplayEval, Run, Workflow
from ledger.usage_selectors import spend_by_workflow
from stateboard.limits import rate_limits, throttled_total
from stateboard.stats import percentile


def _keys_executed_twice(events, key: str | None) -> dict:
    """Idempotency keys whose effect was executed again while an earlier execution could have happened,
    counted by ``key`` (a field path of the event, or None for one total).

    An execution is a ``succeeded`` or ``unknown`` outcome. Only a proof of absence in between (``failed``
    with ``effect_absent`` after the outcome, SPEC §5.2) makes a second execution legitimate.
    """
    group = [key] if key else []
    candidates = (events.filter(kind__in=EXECUTION_KINDS, idempotency_key__gt="")
                  .values("idempotency_key", *group).annotate(n=Count("id")).filter(n__gt=1))
    duplicated: dict = {}
    for row in candidates:  # rare: a key executed twice at all
        history = (events.filter(idempotency_key=row["idempotency_key"], kind__in=(*EXECUTION_KINDS, "failed"))
                   .order_by("at", "id").values_list("kind", "reason_code", "id"))
        group_key = row[key] if key else None
        duplicated[group_key] = duplicated.get(group_key, 0) + (first_repeat(history) is not None)
    return duplicated


def recovery_accuracy() -> dict | None:
    """The latest ``replay_eval`` (SPEC §7): right decisions / decisions; None before the first."""
    latest = ReplayEval.objects.order_by("-created_at", "-id").first()
    if latest is None:
        return None
    return {"accuracy": latest.accuracy, "episodes": latest.episodes, "decisions": latest.decisions,
            "correct": latest.correct, "seed": latest.seed, "at": latest.created_at.isoformat()}


def _ledger_figures(*, workflow_slug: str | None, since, now) -> dict:
    """SPEC §7's ledger figures of one workflow (or all), scanned from the runs, events and effects."""
    runs = Run.objects.filter(staged=False)  # staged (dry) runs are left out of every figure
    events = LedgerEvent.objects.filter(run__staged=False)
    effects = Effect.objects.all()  # a staged run writes no effect
    approvals = Approval.objects.filter(status="pending")
    if workflow_slug:
        runs, effects = runs.filter(workflow__slug=workflow_slug), effects.filter(workflow__slug=workflow_slug)
        events = events.filter(run__workflow__slug=workflow_slug)
        approvals = approvals.filter(run__workflow__slug=workflow_slug)
    if since:
        runs, effects, events = runs.filter(created_at__gte=since), effects.filter(created_at__gte=since), \
            events.filter(at__gte=since)
    effect_total = effects.count()
    twice = _keys_executed_twice(events, None).get(None, 0)
    completed = runs.filter(state="completed")
    completed_total = completed.count()
    unverified_completed = completed.filter(effects__status__in=UNVERIFIED).distinct().count()
    states = dict(runs.filter(state__in=ONCALL_STATES).values_list("state").annotate(n=Count("id"))
                  .order_by())
    outcomes = dict(runs.exclude(decision={}).values_list("decision__outcome").annotate(n=Count("id")).order_by())
    # Measured by the trigger API from the request's arrival to the committed decision (the newest 10,000).
    latencies = list(runs.filter(decision_latency_ms__isnull=False).order_by("-created_at")
                     .values_list("decision_latency_ms", flat=True)[:10000])
    ages = [(now - created).total_seconds() for created in approvals.values_list("created_at", flat=True)]
    return {
        "runs": runs.count(),
        "effects": effect_total,
        "duplicate_side_effect_rate": (twice / effect_total) if effect_total else 0.0,
        "duplicate_side_effects": twice,
        "unverified_completion_rate": (unverified_completed / completed_total) if completed_total else 0.0,
        "unverified_completions": unverified_completed,
        "recovery_decisions": outcomes,
        "p95_trigger_to_decision_ms": percentile(latencies, 0.95),
        "trigger_to_decision_samples": len(latencies),
        "open_approvals": len(ages),
        "open_approvals_max_age_seconds": max(ages) if ages else 0,
        "escalated_runs": states.get("escalated", 0),
        "failed_runs": states.get("failed", 0),
    }


def metrics(*, workflow_slug: str | None = None, since=None, now=None) -> dict:
    """SPEC §7, computed from the ledger and its projections (P95 and recovery accuracy are None without data)."""
    now = now or timezone.now()
    return {"workflow": workflow_slug, "since": since.isoformat() if since else None,
            **_ledger_figures(workflow_slug=workflow_slug, since=since, now=now),
            "recovery_accuracy": recovery_accuracy(), **knowledge_metrics(since=since)}


def prometheus_samples():
    """(name, help, type, [(labels, value)]) for /metrics. A figure with no data is left out (SPEC §7)."""
    runs = [({"state": r["state"]}, r["n"])
            for r in Run.objects.filter(staged=False).values("state").annotate(n=Count("id"))]
    effects = [({"status": r["status"]}, r["n"]) for r in Effect.objects.values("status").annotate(n=Count("id"))]
    m = metrics()
    throttled = throttled_total()
    accuracy = m["recovery_accuracy"]
    p95 = m["p95_trigger_to_decision_ms"]
    families = [
        ("stateboard_runs", "Runs by state.", "gauge", runs),
        ("stateboard_throttled_total", "Requests answered 429 throttled (API_RATE_LIMITS).", "counter",
         [({}, throttled)]),  # left out when the cache cannot be read
        ("stateboard_rate_limiter_up", "1 when the rate limits' cache answers, 0 when requests pass uncounted.",
         "gauge", [({}, int(throttled is not None))] if rate_limits() else []),
        ("stateboard_effects", "Effects by status.", "gauge", effects),
        ("stateboard_open_approvals", "Pending approval requests.", "gauge", [({}, m["open_approvals"])]),
        ("stateboard_open_approvals_max_age_seconds", "Age of the oldest pending approval request.", "gauge",
         [({}, m["open_approvals_max_age_seconds"])]),
        ("stateboard_duplicate_side_effects", "Idempotency keys executed more than once.", "gauge",
         [({}, m["duplicate_side_effects"])]),
        ("stateboard_duplicate_side_effect_rate", "Keys executed twice / all effects.", "gauge",
         [({}, m["duplicate_side_effect_rate"])] if m["effects"] else []),
        ("stateboard_unverified_completions", "Runs completed with an unverified effect.", "gauge",
         [({}, m["unverified_completions"])]),
        ("stateboard_recovery_accuracy", "Right decisions / decisions in the latest replay_eval (0..1).", "gauge",
         [({}, accuracy["accuracy"])] if accuracy else []),
        ("stateboard_recovery_replay_episodes", "Episodes of the latest replay_eval.", "gauge",
         [({}, accuracy["episodes"])] if accuracy else []),
        ("stateboard_trigger_to_decision_p95_seconds", "P95 from a trigger's arrival to its committed decision.",
         "gauge", [({}, p95 / 1000)] if p95 is not None else []),
        ("stateboard_write_gate_rejection_rate", "Share of claim proposals the write gate rejected.", "gauge",
         [({}, m.get("write_gate_rejection_rate"))]),
        ("stateboard_alerts_open", "Open alerts (firing or acknowledged) by rule (SPEC §14).", "gauge",
         alerts_open_counts()),
        *_spend_families(),
        ("stateboard_stale_claim_as_fact_rate", "Share of claim citations that used a stale claim as a fact.",
         "gauge", [({}, m.get("stale_claim_as_fact_rate"))]),
    ]
    # Left out, never written as a non-number: figures without data, and families with no sample left.
    kept = []
    for name, help_text, kind, samples in families:
        samples = [(labels, value) for labels, value in samples if isinstance(value, (int, float, Decimal))]
        if samples:
            kept.append((name, help_text, kind, samples))
    return kept


def _spend_families() -> list:
    """SPEC §16: tokens and cost per workflow (all days the appends kept), counters."""
    slugs = dict(Workflow.objects.values_list("id", "slug"))
    spent = sorted((slugs[workflow_id], figures) for workflow_id, figures in spend_by_workflow().items())
    return [("stateboard_tokens_total", "Tokens agents reported (SPEC §16) by workflow and direction.", "counter",
             [({"workflow": slug, "direction": direction}, figures[f"{direction}_tokens"])
              for slug, figures in spent for direction in ("input", "output")]),
            ("stateboard_cost_usd_total", "Cost in USD agents reported (SPEC §16) by workflow.", "counter",
             [({"workflow": slug}, figures["cost_usd"]) for slug, figures in spent])]


def alerts_open_counts() -> list:
    """[({workflow, rule, severity}, count)] of the open alerts, for /metrics."""
    rows = Alert.objects.filter(state__in=OPEN_STATES).values("workflow__slug", "rule", "severity").annotate(
        n=Count("id")).order_by("workflow__slug", "rule", "severity")
    return [({"workflow": r["workflow__slug"], "rule": r["rule"], "severity": r["severity"]}, r["n"]) for r in rows]
