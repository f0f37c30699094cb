"""/reports/: SPEC §7 figures per workflow over 24 h / 7 d / 30 d from the hourly rollups, with SVG charts."""

from datetime import timedelta
from datetime import timezone as dt_timezone

from django.shortcuts import render
from django.views.decorators.http import require_GET

from knowledge.selectors import knowledge_metrics
from ledger import metrics_selectors, selectors
from ledger import reports as report_data
from ledger.domain.usage import spend_day
from ledger.usage_selectors import spend_by_workflow_day
from stateboard.policy import ANY, Policy, page


def _charts(buckets: list[dict], data: dict, window_p95) -> list[dict]:
    starts, unit = data["starts"], data["unit"]

    def counts(values, title):
        return report_data.bar_chart(values, starts=starts, unit=unit, title=title,
                                     caption=f"{sum(values):,} in the window")

    p95 = [report_data.p95_of(b) for b in buckets]
    return [
        counts([b["runs"] for b in buckets], "Runs triggered"),
        counts([b["completed"] for b in buckets], "Runs completed"),
        counts([b["failed"] + b["escalated"] for b in buckets], "Runs failed or escalated (now)"),
        report_data.bar_chart(p95, starts=starts, unit=unit, value_unit="ms",
                              title=f"P95 decision latency per {unit} (ms)",
                              caption=("window P95 ≤ " + f"{window_p95:g} ms") if window_p95 is not None else
                              "no decisions measured"),
    ]


def _cost_chart(days: dict, budget: dict, *, since, now) -> dict:
    """Cost per UTC day of the window (SPEC §16), with the workflow's day budget as a line when it has one."""
    first = since.astimezone(dt_timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    starts = [first + timedelta(days=n) for n in range((now - first).days + 1)]
    limit = (budget or {}).get("cost_usd_per_day")
    return report_data.bar_chart([float(days.get(spend_day(start), 0)) for start in starts], starts=starts,
                                 unit="day", value_unit="$", title="Cost per UTC day ($)",
                                 caption=f"day budget ${limit}" if limit is not None else "no day budget",
                                 line=float(limit) if limit is not None else None)


@require_GET
@page(Policy(roles=ANY))
def reports(request):
    window = request.GET.get("window", "7d")
    if window not in report_data.WINDOWS:
        window = "7d"
    data = report_data.window_series(window=window)
    approvals = report_data.open_approvals(now=data["now"])
    shared = {"recovery_accuracy": metrics_selectors.recovery_accuracy(), **knowledge_metrics(since=data["since"])}
    overall_total = report_data.empty()
    spent = spend_by_workflow_day(since_day=spend_day(data["since"]))  # SPEC §16, by whole UTC days
    workflows = []
    for workflow in selectors.workflow_list():
        buckets = data["series"].get(workflow.id)
        total = report_data.empty()
        for bucket in buckets or ():
            report_data.add(total, bucket)
        report_data.add(overall_total, total)
        figures = {**report_data.figures_of(total, approvals.get(workflow.id, (0, 0.0))), **shared}
        charts = _charts(buckets, data, figures["p95_trigger_to_decision_ms"]) if buckets else []
        if workflow.id in spent:
            charts.append(_cost_chart(spent[workflow.id]["days"], workflow.budget, since=data["since"], now=data["now"]))
        workflows.append({"slug": workflow.slug, "figures": figures, "usage": spent.get(workflow.id), "charts": charts})
    pending = (sum(n for n, _ in approvals.values()), max((age for _, age in approvals.values()), default=0.0))
    context = {"window": window, "windows": list(report_data.WINDOWS), "workflows": workflows,
               "since": data["since"], "overall": {**report_data.figures_of(overall_total, pending), **shared}}
    template = "ledger/reports.html#reports-body" if request.htmx else "ledger/reports.html"
    return render(request, template, context)
