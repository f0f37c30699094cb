"""SPEC §16 in the writes: an event's ``usage`` checked and added to its run's totals and its workflow's day
(written by the statement that writes the event, ``store.run_write``), the per-run budget's escalation, and
the day budget's one escalation claimed by a trigger. The rules themselves are ``ledger.domain.usage``'s."""

from __future__ import annotations

from dataclasses import replace

from django.db import connection

from ledger.domain.machine import BUDGET_STATES
from ledger.domain.recovery import RecoveryInput, recovery_decide
from ledger.domain.usage import (
    UsageInvalid,
    budget_checked,
    budget_crossed,
    day_spent,
    micro_usd,
    totals_add,
    usage_checked,
    usd_of_micro,
)
from ledger.models import BudgetEscalation, WorkflowDaySpend
from stateboard.errors import Invalid

BUDGET_EXCEEDED = "budget_exceeded"


def usage_valid(usage) -> dict:
    """An event's ``usage`` as recorded (``{}`` when absent); 422 ``invalid_usage`` otherwise."""
    try:
        return usage_checked(usage)
    except UsageInvalid as exc:
        raise Invalid("invalid_usage", str(exc))


def budget_valid(budget) -> dict:
    """A workflow's ``budget`` as the rules read it; 422 ``invalid_budget`` naming the field otherwise."""
    try:
        if not isinstance(budget, dict):
            raise UsageInvalid("budget must be an object {tokens_per_run?, cost_usd_per_run?, cost_usd_per_day?}.")
        return budget_checked(budget)
    except UsageInvalid as exc:
        raise Invalid("invalid_budget", str(exc), errors={"budget": [str(exc)]})


def usage_record(writer, usage: dict) -> None:
    """Add an event's (checked) usage to its run's totals and to what the writer's flush adds to the day."""
    if not usage:
        return
    writer.run.usage = totals_add(writer.run.usage, usage)
    writer.spend[0] += usage.get("input_tokens", 0)
    writer.spend[1] += usage.get("output_tokens", 0)
    writer.spend[2] += micro_usd(usage.get("cost_usd", "0"))


def budget_escalate(writer) -> None:
    """After an event (or a whole batch, recorded whole): when its usage took the run over a per-run budget,
    the run moves to ``escalated`` / ``budget_exceeded`` (the lease ends; the flush opens on-call's request).
    A run no agent holds in a state of its own (compensating, terminal, escalated) is left where it is."""
    run = writer.run
    if not run.workflow.budget or run.usage == writer.before["usage"]:  # (the common append: nothing to check)
        return
    if run.state in BUDGET_STATES and budget_crossed(run.workflow.budget, writer.before["usage"], run.usage):
        writer.transition("escalated", BUDGET_EXCEEDED, cause=BUDGET_EXCEEDED, usage=dict(run.usage),
                          budget=dict(run.workflow.budget))


def day_querysets(*, workflow_id: int, day: str) -> list:
    """A trigger's reads of the workflow's day (``services.runs``' declared reads): its cost in µ$, and the run
    its budget escalation opened, if one stands."""
    return [WorkflowDaySpend.objects.filter(workflow_id=workflow_id, day=day).values_list("cost_micro_usd", flat=True),
            BudgetEscalation.objects.filter(workflow_id=workflow_id, day=day).values_list("run_id", flat=True)]


_CLAIM = (f'INSERT INTO "{BudgetEscalation._meta.db_table}" (workflow_id, day, run_id, intent, created_at) '
          f'VALUES (%s, %s, %s, %s, %s) ON CONFLICT (workflow_id, day) DO NOTHING RETURNING 1')


def day_escalation_claim(*, workflow_id: int, day: str, run, now) -> bool:
    """Claim the workflow's day for ``run``'s budget escalation: True for the one trigger whose insert took the
    unique (workflow, day); False when another holds it (a concurrent claim is waited for, then loses)."""
    field = BudgetEscalation._meta.get_field
    params = [workflow_id, day, field("run_id").get_db_prep_save(run.id, connection), run.intent,
              field("created_at").get_db_prep_save(now, connection)]
    with connection.cursor() as cursor:
        cursor.execute(_CLAIM, params)
        return cursor.fetchone() is not None


def day_budget_input(inp: RecoveryInput, *, budget: dict, day: str | None, day_micro_usd: int, escalated: bool,
                     run, now) -> RecoveryInput:
    """A trigger's decision input with the workflow's day (SPEC §16, checked right after §3's rule 1): spent
    when its cost since 00:00 UTC (``day_micro_usd``, read with the trigger's other reads) is at or over
    ``cost_usd_per_day``. When this trigger would open the day's escalation it claims the day first; a claim
    lost to a concurrent trigger makes it one of the later triggers (``noop``). ``day``: None when the workflow
    sets no ``cost_usd_per_day`` (nothing was read)."""
    if day is None or not day_spent(budget, usd_of_micro(day_micro_usd)):
        return inp
    inp = replace(inp, day_budget_spent=True, day_escalation_stands=escalated)
    if not escalated and recovery_decide(inp).outcome == "escalated" \
            and not day_escalation_claim(workflow_id=run.workflow_id, day=day, run=run, now=now):
        inp = replace(inp, day_escalation_stands=True)
    return inp
