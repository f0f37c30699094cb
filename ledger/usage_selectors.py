"""SPEC §16's reads: what workflows spent (from the days the appends keep, ``WorkflowDaySpend``: never a scan
of events) and what an intent's earlier attempts spent (their runs' totals). Amounts are Decimals."""

from __future__ import annotations

from django.db.models import Sum

from ledger.domain.usage import totals, totals_add, usd_of_micro
from ledger.models import Run, WorkflowDaySpend


def spend_by_workflow(*, since_day: str | None = None) -> dict[int, dict]:
    """{workflow id: {input_tokens, output_tokens, cost_usd (a Decimal)}} over the UTC days from ``since_day``
    (``YYYY-MM-DD``; all days when None), for the workflows that spent anything. One statement."""
    days = WorkflowDaySpend.objects.all()
    if since_day is not None:
        days = days.filter(day__gte=since_day)
    rows = days.values("workflow_id").annotate(i=Sum("input_tokens"), o=Sum("output_tokens"),
                                               c=Sum("cost_micro_usd")).order_by("workflow_id")
    return {r["workflow_id"]: {"input_tokens": r["i"], "output_tokens": r["o"], "cost_usd": usd_of_micro(r["c"])}
            for r in rows}


def spend_by_workflow_day(*, since_day: str) -> dict[int, dict]:
    """{workflow id: {"days": {YYYY-MM-DD: cost_usd}, and the totals as ``spend_by_workflow``}} over the UTC days
    from ``since_day``, for the workflows that spent anything. One statement."""
    found: dict[int, dict] = {}
    rows = WorkflowDaySpend.objects.filter(day__gte=since_day).values_list(
        "workflow_id", "day", "input_tokens", "output_tokens", "cost_micro_usd").order_by("workflow_id", "day")
    for workflow_id, day, input_tokens, output_tokens, micro in rows:
        spent = found.setdefault(workflow_id, {"days": {}, "input_tokens": 0, "output_tokens": 0, "micro": 0})
        spent["days"][str(day)] = usd_of_micro(micro)
        spent["input_tokens"] += input_tokens
        spent["output_tokens"] += output_tokens
        spent["micro"] += micro
    for spent in found.values():
        spent["cost_usd"] = usd_of_micro(spent.pop("micro"))
    return found


def earlier_attempts_spent(run: Run) -> dict:
    """What the intent's runs triggered before ``run`` spent (staged runs count too: they are attempts whose
    agents spent), ``{runs, input_tokens, output_tokens, cost_usd (a decimal string)}``. One statement."""
    earlier = (Run.objects.filter(workflow_id=run.workflow_id, intent=run.intent, created_at__lte=run.created_at)
               .exclude(id=run.id).values_list("usage", flat=True))
    spent, count = {}, 0
    for usage in earlier:
        count += 1
        if usage:
            spent = totals_add(spent, usage)
    return {"runs": count, **totals(spent)}
