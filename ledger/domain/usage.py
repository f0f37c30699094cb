"""SPEC §16's usage and budgets as plain data: an event's ``usage`` checked, a run's totals added up, a
workflow's ``budget`` checked, and whether a run's totals cross it. Pure: no models, no database.

Money is a ``Decimal`` here and a decimal string in JSON (an event's ``usage``, a run's totals, a budget),
never a float: a number an agent sends is taken as the digits it wrote (``repr`` of the float the JSON
parser made, its shortest round-trip form), never as the binary value. What is summed in SQL (the
workflow's day, ``WorkflowDaySpend``) is counted in millionths of a dollar, an integer.
"""

from __future__ import annotations

import re
from datetime import datetime
from datetime import timezone as dt_timezone
from decimal import Decimal, InvalidOperation

USAGE_FIELDS = ("input_tokens", "output_tokens", "cost_usd", "model")
TOKEN_FIELDS = ("input_tokens", "output_tokens")
MODEL_MAX = 100
PLACES = 6
MICRO = Decimal(10) ** PLACES
TOKENS_MAX = 10 ** 15  # per event, and per budget value: far beyond any real figure, well inside a bigint
COST_MAX = Decimal(10) ** 12  # likewise in dollars (millionths of it still fit a bigint many times over)
BUDGET_FIELDS = ("tokens_per_run", "cost_usd_per_run", "cost_usd_per_day")
_DECIMAL_TEXT = re.compile(r"^[0-9]+(\.[0-9]+)?$")


class UsageInvalid(ValueError):
    """Why a ``usage`` object (or a ``budget``) is refused: 422 ``invalid_usage`` (``invalid_budget``)."""


def money(value, what: str) -> Decimal:
    """A non-negative amount with at most six decimal places, from an integer, a JSON number or a decimal
    string (plain notation: ``"0.0125"``, never ``"1e-3"`` or ``" 1"``); UsageInvalid otherwise. A number is
    taken as written: 0.1 is 0.1 (its shortest repr), not 0.1000000000000000055511151231257827."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise UsageInvalid(f"{what} must be a decimal number or string.")
    if isinstance(value, str) and not _DECIMAL_TEXT.match(value):
        raise UsageInvalid(f"{what} must be a non-negative decimal string such as \"0.0125\".")
    try:
        amount = Decimal(repr(value) if isinstance(value, float) else value)
    except (InvalidOperation, ValueError):
        raise UsageInvalid(f"{what} must be a decimal number or string.")
    if not amount.is_finite() or amount < 0 or amount >= COST_MAX:
        raise UsageInvalid(f"{what} must be a non-negative decimal below {COST_MAX}.")
    if -amount.as_tuple().exponent > PLACES:
        raise UsageInvalid(f"{what} has more than {PLACES} decimal places.")
    return amount


def money_text(amount: Decimal) -> str:
    """A decimal string without exponent (``Decimal("1E-5")`` → ``"0.00001"``)."""
    return format(amount, "f")


def _count(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= TOKENS_MAX:
        raise UsageInvalid(f"{what} must be a JSON integer from 0 to {TOKENS_MAX} (\"12\" is not one).")
    return value


def usage_checked(usage) -> dict:
    """An event's ``usage`` as recorded: ``{}`` when absent, else the fields given, token counts as integers,
    ``cost_usd`` as a decimal string; UsageInvalid for anything else."""
    if usage is None:
        return {}
    if not isinstance(usage, dict):
        raise UsageInvalid("usage must be an object {input_tokens?, output_tokens?, cost_usd?, model?}.")
    unknown = set(usage) - set(USAGE_FIELDS)
    if unknown:
        raise UsageInvalid(f"Unknown usage fields: {', '.join(sorted(unknown))}.")
    checked: dict = {name: _count(usage[name], f"usage.{name}") for name in TOKEN_FIELDS if name in usage}
    if "cost_usd" in usage:
        checked["cost_usd"] = money_text(money(usage["cost_usd"], "usage.cost_usd"))
    if "model" in usage:
        model = usage["model"]
        if not isinstance(model, str) or not 0 < len(model) <= MODEL_MAX:
            raise UsageInvalid(f"usage.model must be a non-empty string of at most {MODEL_MAX} characters.")
        checked["model"] = model
    return checked


def totals(run_usage: dict | None) -> dict:
    """A run's totals as its body shows them: ``{input_tokens, output_tokens, cost_usd}`` (a decimal string)."""
    run_usage = run_usage or {}
    return {"input_tokens": run_usage.get("input_tokens", 0), "output_tokens": run_usage.get("output_tokens", 0),
            "cost_usd": run_usage.get("cost_usd", "0")}


def totals_add(run_usage: dict | None, usage: dict) -> dict:
    """The totals after one event's (checked) ``usage``."""
    before = totals(run_usage)
    return {"input_tokens": before["input_tokens"] + usage.get("input_tokens", 0),
            "output_tokens": before["output_tokens"] + usage.get("output_tokens", 0),
            "cost_usd": money_text(Decimal(before["cost_usd"]) + Decimal(usage.get("cost_usd", "0")))}


def usage_replay(events) -> dict:
    """A run's totals as its events (any order) determine them; ``{}`` when none carried usage."""
    found: dict = {}
    for event in events:
        if getattr(event, "usage", None):
            found = totals_add(found, event.usage)
    return found


def micro_usd(cost: str | Decimal) -> int:
    """Millionths of a dollar (exact: an amount has at most six places)."""
    return int(Decimal(cost) * MICRO)


def usd_of_micro(micro: int) -> Decimal:
    return (Decimal(micro) / MICRO).quantize(Decimal(1).scaleb(-PLACES))


# ---------------------------------------------------------------- budgets

def budget_checked(budget) -> dict:
    """A workflow's ``budget`` as the rules read it: ``{}`` when absent, else the fields given, ``tokens_per_run``
    an integer and ``cost_usd_*`` decimal strings (the definition keeps what its owner wrote: a number or a
    string); UsageInvalid naming the field otherwise."""
    if budget is None:
        return {}
    if not isinstance(budget, dict):
        raise UsageInvalid("budget must be an object {tokens_per_run?, cost_usd_per_run?, cost_usd_per_day?}.")
    unknown = set(budget) - set(BUDGET_FIELDS)
    if unknown:
        raise UsageInvalid(f"Unknown budget fields: {', '.join(sorted(unknown))}.")
    checked: dict = {}
    if "tokens_per_run" in budget:
        checked["tokens_per_run"] = _count(budget["tokens_per_run"], "budget.tokens_per_run")
    for name in ("cost_usd_per_run", "cost_usd_per_day"):
        if name in budget:
            checked[name] = money_text(money(budget[name], f"budget.{name}"))
    return checked


def _over(budget: dict, run_totals: dict) -> bool:
    """Strictly over a per-run budget (``tokens_per_run`` counts input and output tokens together)."""
    if "tokens_per_run" in budget and \
            run_totals["input_tokens"] + run_totals["output_tokens"] > budget["tokens_per_run"]:
        return True
    return "cost_usd_per_run" in budget and Decimal(run_totals["cost_usd"]) > Decimal(budget["cost_usd_per_run"])


def budget_crossed(budget: dict | None, before: dict | None, after: dict | None) -> bool:
    """Whether the usage between ``before`` and ``after`` (a run's totals) took the run over a per-run budget:
    over it now and not before. A run already over it (its budget lowered, or on-call retried it after its
    ``budget_exceeded``) is not escalated again by the next event."""
    budget = budget_checked(budget or {})  # (the stored definition: as its owner wrote it, numbers or strings)
    return _over(budget, totals(after)) and not _over(budget, totals(before))


def day_spent(budget: dict | None, day_cost: Decimal) -> bool:
    """The workflow's cost since 00:00 UTC is at or over its ``cost_usd_per_day`` (False without one)."""
    limit = budget_checked(budget or {}).get("cost_usd_per_day")
    return limit is not None and day_cost >= Decimal(limit)


def spend_day(moment: datetime) -> str:
    """The UTC day a moment counts towards: ``YYYY-MM-DD``."""
    return moment.astimezone(dt_timezone.utc).strftime("%Y-%m-%d")
