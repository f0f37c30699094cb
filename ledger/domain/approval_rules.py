"""Who approves (SPEC §17) as plain data: a workflow's ``approval_rules`` checked, the rules a request takes
when it is opened, whether a person is among a request's approvers, and a vote.

``approval_rules: {<stage>: {approvers: [...], quorum: N, action_schema?: {...}}}``, for approval stages only;
an approver is ``user:<name>``, ``group:<name>`` (an approver group, ``ledger.models.ApproverGroup``) or
``role:editor``; ``action_schema`` a JSON Schema (draft 2020-12) an amended action must satisfy. Pure: no
models, no database.
"""

from __future__ import annotations

from datetime import datetime

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from referencing.exceptions import Unresolvable

DEFAULT_APPROVERS = ("role:editor",)
ESCALATION_APPROVERS = ("role:oncall",)  # what an escalation request shows: on-call decides it (unchanged)
QUORUM_MAX = 5
MAX_APPROVERS = 50
NAME_MAX = 200
FIELDS = ("approvers", "quorum", "action_schema")
PREFIXES = ("user:", "group:")
ROLE_APPROVERS = ("role:editor",)


def default_approvers() -> list[str]:
    return list(DEFAULT_APPROVERS)


class RulesInvalid(ValueError):
    """Why a workflow's ``approval_rules`` is refused: the stage, the field and a message."""

    def __init__(self, stage: str, field: str, message: str):
        super().__init__(message)
        self.stage, self.field, self.message = stage, field, message


def _approver_valid(entry) -> bool:
    if not isinstance(entry, str):
        return False
    if entry in ROLE_APPROVERS:
        return True
    prefix = next((p for p in PREFIXES if entry.startswith(p)), None)
    name = entry[len(prefix):] if prefix else ""
    return bool(name) and len(name) <= NAME_MAX and name == name.strip()


def rules_checked(rules, *, stages, approval_stages, schema_problem=None) -> dict:
    """``rules`` as given when valid; ``RulesInvalid`` naming the first problem otherwise. ``schema_problem``:
    the check of an ``action_schema`` (its problem as text, or None)."""
    if not isinstance(rules, dict):
        raise RulesInvalid("", "approval_rules", "approval_rules must be an object {stage: {approvers, quorum, "
                                                 "action_schema?}}.")
    for stage, rule in rules.items():
        if stage not in stages:
            raise RulesInvalid(stage, "stage", f"{stage!r} is not a stage of this workflow.")
        if stage not in approval_stages:
            raise RulesInvalid(stage, "stage", f"{stage!r} is not an approval stage of this workflow.")
        if not isinstance(rule, dict):
            raise RulesInvalid(stage, "stage", "each stage's rule must be an object {approvers, quorum, "
                                               "action_schema?}.")
        unknown = sorted(set(rule) - set(FIELDS))
        if unknown:
            raise RulesInvalid(stage, unknown[0], f"unknown field {unknown[0]!r} (approvers, quorum, action_schema).")
        approvers = rule.get("approvers", list(DEFAULT_APPROVERS))
        if not isinstance(approvers, list) or not approvers or len(approvers) > MAX_APPROVERS \
                or not all(_approver_valid(a) for a in approvers) or len(set(approvers)) != len(approvers):
            raise RulesInvalid(stage, "approvers", f"approvers must be a non-empty list of at most {MAX_APPROVERS} "
                                                   "distinct entries user:<name>, group:<name> or role:editor.")
        quorum = rule.get("quorum", 1)
        if isinstance(quorum, bool) or not isinstance(quorum, int) or not 1 <= quorum <= QUORUM_MAX:
            raise RulesInvalid(stage, "quorum", f"quorum must be an integer from 1 to {QUORUM_MAX}.")
        if all(a.startswith("user:") for a in approvers) and quorum > len(approvers):
            raise RulesInvalid(stage, "quorum", f"quorum {quorum} can never be met by the {len(approvers)} people "
                                                "named in approvers.")
        if "action_schema" in rule:
            schema = rule["action_schema"]
            problem = "action_schema must be an object (a JSON Schema)." if not isinstance(schema, dict) \
                else schema_problem(schema) if schema_problem else None
            if problem:
                raise RulesInvalid(stage, "action_schema", problem)
    return rules


def rules_for(rules, stage: str) -> tuple[list[str], int]:
    """(approvers, quorum) a request for ``stage`` takes from a workflow's (valid) rules, defaults otherwise."""
    rule = rules.get(stage) if isinstance(rules, dict) else None
    rule = rule if isinstance(rule, dict) else {}
    return list(rule.get("approvers", DEFAULT_APPROVERS)), rule.get("quorum", 1)


def action_schema_of(rules, stage: str):
    """The stage's ``action_schema``, or None (then any object is an action)."""
    rule = rules.get(stage) if isinstance(rules, dict) else None
    return rule.get("action_schema") if isinstance(rule, dict) else None


def approvers_match(approvers, *, username: str, groups) -> bool:
    """Whether a person (already known to be an editor) is among ``approvers``: ``role:editor`` takes every
    editor, ``user:<name>`` them by name, ``group:<name>`` the members of that approver group."""
    return any(entry in ROLE_APPROVERS or entry == f"user:{username}"
               or (entry.startswith("group:") and entry[6:] in groups) for entry in approvers)


def groups_named(approvers) -> set[str]:
    return {entry[6:] for entry in approvers if entry.startswith("group:")}


def users_named(approvers) -> set[str]:
    return {entry[5:] for entry in approvers if entry.startswith("user:")}


def vote(*, by: str, at: datetime, reason: str) -> dict:
    """One approving vote as a request keeps it (and as its ledger event rebuilds it)."""
    return {"by": str(by), "at": at.isoformat(), "reason": reason}


def vote_of(votes, actor: str) -> dict | None:
    """``actor``'s approving vote among a request's ``votes``, or None (a vote counts once per person)."""
    return next((vote for vote in votes if vote.get("by") == actor), None)


def schema_problem(schema) -> str | None:
    """Why ``schema`` is not a JSON Schema (draft 2020-12) for an action, or None."""
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        return f"not a JSON Schema (draft 2020-12): {exc.message}"
    if schema.get("type", "object") not in ("object", ["object"]):
        return "an action is a JSON object: the schema's type, when given, is \"object\"."
    try:  # a $ref at the top that leads nowhere (nothing is ever fetched)
        list(Draft202012Validator(schema).iter_errors({}))
    except Unresolvable as exc:
        return f"it names what it cannot resolve ({exc})."
    return None


def action_problem(schema, action) -> str | None:
    """Why ``action`` does not satisfy the stage's ``schema`` (without one: why it is not an object), or None."""
    if not isinstance(action, dict):
        return "action must be a JSON object."
    if schema is None:
        return None
    try:
        errors = sorted(Draft202012Validator(schema).iter_errors(action), key=lambda e: list(e.absolute_path))
    except Unresolvable as exc:
        return f"the stage's action_schema names what it cannot resolve ({exc})."
    if not errors:
        return None
    first = errors[0]
    where = "/".join(str(part) for part in first.absolute_path)
    return f"action{'.' + where.replace('/', '.') if where else ''}: {first.message}"
