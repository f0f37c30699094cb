"""Alert rules (SPEC §14) as plain data: their vocabulary and the one check of a workflow's ``alerts`` list.

Pure: the check is given the workflow's stages and ``lease_seconds`` and a cron checker, and answers the
first problem as ``(rule, field, message)`` or None.
"""

from __future__ import annotations

import re
from typing import Callable

from ledger.domain.attributes import AttributesInvalid, rule_selection
from ledger.domain.machine import RunState

KINDS = ("absence", "failure_rate", "escalation_age", "approval_age", "queue_age")
SEVERITIES = ("page", "ticket", "info")
CHANNELS = ("inapp", "email", "chat", "webhook", "pagerduty")
STATES = ("firing", "acknowledged", "resolved")
OPEN_STATES = ("firing", "acknowledged")
PAGERDUTY_SEVERITY = {"page": "critical", "ticket": "warning", "info": "info"}
SYSTEM = "system"
NAME = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")
MAX_RULES = 50
MAX_MINUTES = 525_600  # a year
COMMON = ("name", "kind", "severity", "notify", "attributes")
PARAMETERS = {
    "absence": {"cron": True, "within_minutes": True, "stage": False},
    "failure_rate": {"window_minutes": True, "threshold": True, "min_runs": True},
    "escalation_age": {"minutes": True},
    "approval_age": {"minutes": True},
    "queue_age": {"minutes": True},
}
# failure_rate (API.md, settled 2026-12-07): how a run ended (bad: these, or escalated); noop is left out.
BAD_ENDS = (RunState.FAILED, RunState.ABANDONED)
ESCALATED = RunState.ESCALATED
GOOD_ENDS = (RunState.COMPLETED, RunState.COMPENSATED)
AGED_STATES = (RunState.ESCALATED, RunState.COMPENSATE)  # escalation_age


def _integer(value, low: int, high: int) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and low <= value <= high


def _rule_problem(rule: dict, *, stages, lease_seconds: int, cron_problem: Callable[[str], str | None]):
    """The first problem of one rule (its name known valid) as (field, message), or None."""
    kind = rule.get("kind")
    if kind not in KINDS:
        return "kind", f"kind must be one of {', '.join(KINDS)}."
    if rule.get("severity") not in SEVERITIES:
        return "severity", f"severity must be one of {', '.join(SEVERITIES)}."
    notify = rule.get("notify")
    if not isinstance(notify, list) or not notify or not all(c in CHANNELS for c in notify) \
            or len(set(notify)) != len(notify):
        return "notify", f"notify must be a non-empty list of distinct channels from {', '.join(CHANNELS)}."
    try:  # the runs it looks at: each key equal, as attr.<key>=<value> selects them (SPEC §15)
        rule_selection(rule.get("attributes", {}))
    except AttributesInvalid as invalid:
        return "attributes", invalid.detail
    wanted = PARAMETERS[kind]
    for key in rule:
        if key not in COMMON and key not in wanted:
            return key, f"{key!r} is not a parameter of a {kind} rule ({', '.join(wanted)})."
    for key, required in wanted.items():
        if required and key not in rule:
            return key, f"a {kind} rule needs {key}."
    for key in ("within_minutes", "window_minutes", "minutes"):
        if key in wanted and not _integer(rule[key], 1, MAX_MINUTES):
            return key, f"{key} must be an integer from 1 to {MAX_MINUTES:,}."
    if kind == "absence":
        cron = rule["cron"]
        problem = "cron must be a string." if not isinstance(cron, str) or len(cron) > 100 else cron_problem(cron)
        if problem:
            return "cron", problem
        if "stage" in rule and rule["stage"] not in stages:
            return "stage", f"{rule['stage']!r} is not a stage of this workflow."
    if kind == "failure_rate":
        threshold = rule["threshold"]
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 <= threshold <= 1:
            return "threshold", "threshold must be a number from 0 to 1."
        if not _integer(rule["min_runs"], 1, 1_000_000):
            return "min_runs", "min_runs must be an integer from 1 to 1,000,000."
    if kind == "queue_age" and rule["minutes"] * 60 >= lease_seconds:
        return "minutes", (f"a queue_age rule whose minutes reach lease_seconds ({lease_seconds} s) can never fire: "
                           "a queued run fails not_leased first.")
    return None


def alerts_problem(alerts, *, stages, lease_seconds: int, cron_problem: Callable[[str], str | None]):
    """The first problem of a workflow's ``alerts`` as (rule name or index, field, message), or None."""
    if not isinstance(alerts, list) or len(alerts) > MAX_RULES:
        return "", "alerts", f"alerts must be a list of at most {MAX_RULES} rules."
    seen: set[str] = set()
    for index, rule in enumerate(alerts):
        if not isinstance(rule, dict):
            return f"#{index}", "alerts", "each rule must be an object {name, kind, severity, notify, ...}."
        name = rule.get("name")
        if not isinstance(name, str) or not NAME.match(name):
            return f"#{index}", "name", "name must match [a-z][a-z0-9_-]{0,39}."
        if name in seen:
            return name, "name", f"two rules are named {name!r}."
        seen.add(name)
        problem = _rule_problem(rule, stages=stages, lease_seconds=lease_seconds, cron_problem=cron_problem)
        if problem:
            return (name, *problem)
    return None
