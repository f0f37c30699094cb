"""/reports/: SPEC §7 metrics per workflow over 24 h / 7 d / 30 d, as server-rendered SVG charts."""

from django.shortcuts import render
from django.views.decorators.http import require_GET

from ledger import reports as report_data
from ledger import selectors
from stateboard.policy import ANY, Policy, page


@require_GET
@page(Policy(roles=ANY))
def reports(request):
    window = request.GET.get("window", "7d")
    if window not in report_data.WINDOWS:
        window = "7d"
    data = report_data.series(window=window)
    labels = (data["since"].strftime("%Y-%m-%d %H:%M UTC"), data["now"].strftime("%Y-%m-%d %H:%M UTC"))
    workflows = []
    listed = list(selectors.workflow_list())
    per_workflow = selectors.metrics_by_workflow(slugs=[w.slug for w in listed], since=data["since"],
                                                 now=data["now"])
    for workflow in listed:
        buckets = data["workflows"].get(workflow.slug, [])
        figures = per_workflow[workflow.slug]
        workflows.append({
            "slug": workflow.slug, "figures": figures,
            "charts": [
                report_data.bar_chart([b["runs"] for b in buckets], labels=labels, title="runs triggered"),
                report_data.bar_chart([b["completed"] for b in buckets], labels=labels, title="runs completed"),
                report_data.bar_chart([b["failed"] + b["escalated"] for b in buckets], labels=labels,
                                  title="runs failed or escalated"),
                report_data.bar_chart([b["p95_ms"] for b in buckets], labels=labels,
                                  title="P95 trigger → decision (ms)"),
            ] if buckets else [],
        })
    context = {"window": window, "windows": list(report_data.WINDOWS), "workflows": workflows,
               "overall": selectors.metrics(since=data["since"], now=data["now"])}
    template = "ledger/reports.html#reports-body" if request.htmx else "ledger/reports.html"
    return render(request, template, context)

