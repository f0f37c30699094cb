"""Workflows: definition (also in the file form `apply` takes), schedule and its next ticks (UTC), policy
history, recent runs."""

from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

from celery.schedules import crontab
from django.db.models import Count, Max
from django.http import Http404
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from ledger import authorizers, selectors, services, stage_selectors
from stateboard.policy import ANY, Policy, page


def next_ticks(schedule: str, *, now=None, count: int = 5) -> list:
    """The next ``count`` moments (UTC) of a five-field cron line, parsed by Celery's crontab.

    Day of month and day of week both restrict (Celery's semantics). Empty for no or a bad schedule.
    """
    try:
        minute, hour, day, month, weekday = schedule.split()
        cron = crontab(minute=minute, hour=hour, day_of_month=day, month_of_year=month, day_of_week=weekday)
    except Exception:  # noqa: BLE001 — any parse failure means "no next ticks"
        return []
    now = (now or timezone.now()).astimezone(dt_timezone.utc).replace(second=0, microsecond=0)
    ticks = []
    for offset in range(0, 366 * 5):
        date = (now + timedelta(days=offset)).date()
        if date.month not in cron.month_of_year or date.day not in cron.day_of_month:
            continue
        if (date.weekday() + 1) % 7 not in cron.day_of_week:  # cron: Sunday is 0
            continue
        for h in sorted(cron.hour):
            for m in sorted(cron.minute):
                moment = datetime(date.year, date.month, date.day, h, m, tzinfo=dt_timezone.utc)
                if moment > now:
                    ticks.append(moment)
                    if len(ticks) == count:
                        return ticks
    return ticks


def executor_names(workflow) -> list[str]:
    """``stage: handler`` of each stage Stateboard executes itself; never the handler's config (it may
    hold credentials)."""
    return [f"{stage}: {spec.get('handler', '?') if isinstance(spec, dict) else '?'}"
            for stage, spec in sorted((workflow.executors or {}).items())]


@require_GET
@page(Policy(roles=ANY))
def workflow_list(request):
    """Every workflow with its run count and latest run."""
    workflows = (selectors.workflow_list()
                 .annotate(run_count=Count("runs"), last_run_at=Max("runs__created_at")))
    template = "ledger/workflow_list.html#workflow-table" if request.htmx else "ledger/workflow_list.html"
    return render(request, template, {"workflows": workflows})


@require_GET
@page(Policy(roles=ANY))
def workflow_detail(request, slug):
    workflow = selectors.workflow_list().select_related("owner").filter(slug=slug).first()
    if workflow is None:
        raise Http404("No such workflow.")
    shown = authorizers.sees_executors(request.user)
    runs = list(selectors.runs_filtered({"workflow": workflow.slug}).qs[:20])
    context = {
        "definition": services.file_form([workflow], executors=shown), "definition_has_executors": shown,
        "workflow": workflow, "ticks": next_ticks(workflow.schedule) if workflow.schedule else [],
        "policy_history": list(selectors.policy_history(workflow=workflow)),
        "runs": runs, "grid": stage_selectors.stage_grid(workflow=workflow, runs=runs),
        "executors": executor_names(workflow),
    }
    template = "ledger/workflow_detail.html#workflow-body" if request.htmx else "ledger/workflow_detail.html"
    return render(request, template, context)

