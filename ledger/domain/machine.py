"""The run state machine (SPEC §2) as data: the engine validates against it, the run page draws it,
and every group of states a reader or writer asks about is named here.

A transition is ``(from_state, cause, to_state)``. The cause names what moved the run: an agent's
event kind (``started``, ``succeeded``, …), a human action (``retried``, ``abandoned``), the
decision (``decided``), the executor (``executor``), or a sweep (``lease_expired``, whose reason is
``lease_expired`` or, for a queued run no agent leased, ``not_leased``). Leasing a queued run is a
``leased`` event, not a transition. ``RunWriter.transition`` refuses any
move that is not in ``TRANSITIONS``, so the table is the one home of the rule.
"""

from __future__ import annotations

from django.db.models import TextChoices


class RunState(TextChoices):
    CAPTURED = "captured"
    RESTORE = "restore"
    COMPARE = "compare"
    FRESH = "fresh"
    RESUME = "resume"
    VERIFY_ONLY = "verify_only"
    NOOP = "noop"
    ESCALATED = "escalated"
    EXECUTE = "execute"
    CHECKPOINTED = "checkpointed"
    FAILED = "failed"
    COMPLETED = "completed"
    AWAITING_APPROVAL = "awaiting_approval"
    VERIFY = "verify"
    COMPENSATE = "compensate"
    COMPENSATED = "compensated"
    ABANDONED = "abandoned"


TERMINAL_STATES = frozenset({"completed", "noop", "compensated", "abandoned", "failed"})
# States in which a run holds its intent: at most one run per (workflow, intent).
HOLDING_STATES = (
    "captured", "restore", "compare", "fresh", "resume", "verify_only", "execute",
    "checkpointed", "verify", "awaiting_approval", "compensate",
)
# States an event's usage can move to `escalated` over a per-run budget (SPEC §16): those an agent holds.
BUDGET_STATES = ("fresh", "resume", "verify_only", "execute", "checkpointed", "verify", "awaiting_approval")
# States whose lease can expire (a run in `compensate` waits for on-call; while a high-impact
# request is pending its lease is cleared, so it cannot expire while a human decides).
LEASED_STATES = tuple(s for s in HOLDING_STATES if s != "compensate")
# Nobody holds a run that moves to one of these: its lease ends with the transition.
LEASE_ENDING_STATES = TERMINAL_STATES | {"escalated"}
# The intent's runs a trigger (or a retry) must see before it decides: holding, or waiting on on-call.
INTENT_HOLDING_STATES = (*HOLDING_STATES, "escalated")
# States in which a run still owes the world something: it keeps its goal until they are over (SPEC §10.1).
OWING_STATES = frozenset({"execute", "verify", "verify_only", "compensate"})

S = RunState

# States a decision can land in (SPEC §3).
DECIDED_STATES = (S.FRESH, S.RESUME, S.VERIFY_ONLY, S.NOOP, S.ESCALATED)
# Finished (or held-for-a-human) states that a rollback can reopen (SPEC §10.2).
ROLLBACK_STATES = (S.COMPLETED, S.FAILED, S.ESCALATED, S.ABANDONED, S.COMPENSATED)
# States between stages that a goal change moves back to `restore` (SPEC §10.1).
GOAL_CHANGE_STATES = (S.FRESH, S.RESUME, S.CHECKPOINTED, S.AWAITING_APPROVAL)

# States the executor holds a run in: between the agent's proposal and the stage's verification, and
# while it performs an approved compensation on its stage.
EXECUTOR_STATES = (S.FRESH, S.RESUME, S.CHECKPOINTED, S.AWAITING_APPROVAL, S.EXECUTE, S.VERIFY, S.COMPENSATE)

TRANSITIONS: frozenset[tuple[str, str, str]] = frozenset({
    # trigger and decision
    (S.CAPTURED, "decided", S.RESTORE),
    (S.RESTORE, "decided", S.FRESH),
    (S.RESTORE, "decided", S.COMPARE),
    *((S.COMPARE, "decided", to) for to in DECIDED_STATES),
    # stages
    (S.FRESH, "started", S.EXECUTE),
    (S.RESUME, "started", S.EXECUTE),
    (S.CHECKPOINTED, "started", S.EXECUTE),
    (S.FRESH, "skipped", S.EXECUTE),
    (S.RESUME, "skipped", S.EXECUTE),
    (S.CHECKPOINTED, "skipped", S.EXECUTE),
    (S.EXECUTE, "succeeded", S.CHECKPOINTED),
    (S.EXECUTE, "skipped", S.CHECKPOINTED),
    (S.EXECUTE, "verified", S.CHECKPOINTED),
    (S.EXECUTE, "failed", S.FAILED),
    (S.EXECUTE, "unknown", S.VERIFY),
    (S.CHECKPOINTED, "succeeded", S.COMPLETED),
    (S.CHECKPOINTED, "skipped", S.COMPLETED),
    (S.CHECKPOINTED, "verified", S.COMPLETED),
    (S.CHECKPOINTED, "succeeded", S.VERIFY),
    (S.CHECKPOINTED, "verified", S.VERIFY),
    (S.CHECKPOINTED, "failed", S.VERIFY),
    # verification
    (S.VERIFY_ONLY, "verified", S.VERIFY),
    (S.VERIFY_ONLY, "failed", S.VERIFY),
    (S.VERIFY, "verified", S.CHECKPOINTED),
    (S.VERIFY, "verified", S.COMPLETED),
    (S.VERIFY, "failed", S.CHECKPOINTED),  # checked and found absent: the stage may run again
    (S.VERIFY, "failed", S.COMPENSATE),  # partial or inconsistent
    # human approval
    (S.FRESH, "approval_requested", S.AWAITING_APPROVAL),
    (S.RESUME, "approval_requested", S.AWAITING_APPROVAL),
    (S.CHECKPOINTED, "approval_requested", S.AWAITING_APPROVAL),
    (S.AWAITING_APPROVAL, "started", S.EXECUTE),
    (S.AWAITING_APPROVAL, "rejected", S.ABANDONED),
    (S.AWAITING_APPROVAL, "expired", S.ESCALATED),
    # compensation and on-call
    (S.COMPENSATE, "compensated", S.COMPENSATED),
    (S.COMPENSATE, "rejected", S.ESCALATED),
    (S.COMPENSATE, "expired", S.ESCALATED),
    (S.COMPENSATE, "compensate", S.ESCALATED),  # the compensation cannot be derived deterministically
    (S.ESCALATED, "retried", S.RESTORE),
    (S.ESCALATED, "compensate", S.COMPENSATE),
    (S.ESCALATED, "abandoned", S.ABANDONED),
    # the executor (SPEC §5.2): an agent's proposal on an approval stage waits for a human;
    # the executor escalates when it cannot verify or is misconfigured
    (S.FRESH, "proposed", S.AWAITING_APPROVAL),
    (S.RESUME, "proposed", S.AWAITING_APPROVAL),
    (S.CHECKPOINTED, "proposed", S.AWAITING_APPROVAL),
    *((state, "executor", S.ESCALATED) for state in EXECUTOR_STATES),
    # a staged run's proposal on an executor stage passes the stage and calls nothing (SPEC §10.3)
    (S.FRESH, "proposed", S.EXECUTE),
    (S.RESUME, "proposed", S.EXECUTE),
    (S.CHECKPOINTED, "proposed", S.EXECUTE),
    (S.EXECUTE, "proposed", S.CHECKPOINTED),
    (S.CHECKPOINTED, "proposed", S.COMPLETED),
    # a new goal version (SPEC §10.1): a run between stages that owes the world nothing is decided again;
    # one that still owed something is moved once its effects are verified, absent or compensated
    *((state, "goal_changed", S.RESTORE) for state in GOAL_CHANGE_STATES),
    (S.COMPENSATE, "goal_changed", S.RESTORE),
    # rollback to a stage (SPEC §10.2): decided again, or first the isolated effects are compensated
    *((state, "rolled_back", S.RESTORE) for state in ROLLBACK_STATES),
    *((state, "rolled_back", S.COMPENSATE) for state in ROLLBACK_STATES),
    (S.COMPENSATE, "compensated", S.RESTORE),
    # the lease ran out: the agent died (or no agent leased a queued run)
    *((state, "lease_expired", S.FAILED) for state in LEASED_STATES),
    # an event's usage took the run over a per-run budget (SPEC §16): on-call decides
    *((state, "budget_exceeded", S.ESCALATED) for state in BUDGET_STATES),
})

EDGES: frozenset[tuple[str, str]] = frozenset((a, b) for a, _, b in TRANSITIONS)

# On-call's actions, each by the cause it drives: an action applies in the states its cause leaves.
ONCALL_ACTIONS: dict[str, frozenset[str]] = {
    action: frozenset(a for a, c, _ in TRANSITIONS if c == cause)
    for action, cause in {"retry": "retried", "compensate": "compensate", "abandon": "abandoned"}.items()
}
# A run waits for on-call where one of its actions applies; the on-call page also lists failed runs (history).
NEEDS_HUMAN_STATES = tuple(s for s in RunState.values if any(s in states for states in ONCALL_ACTIONS.values()))
ONCALL_STATES = (*NEEDS_HUMAN_STATES, "failed")


def allowed(from_state: str, cause: str, to_state: str) -> bool:
    return (from_state, cause, to_state) in TRANSITIONS


def causes(from_state: str, to_state: str) -> list[str]:
    """The causes that can move a run from one state to another (for the drawing's labels)."""
    return sorted({c for a, c, b in TRANSITIONS if a == from_state and b == to_state})


def is_terminal(state: str) -> bool:
    return state in TERMINAL_STATES
