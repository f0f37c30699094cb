"""Model rows as export lines and back: every concrete field by its column name, ids kept."""

from __future__ import annotations

import datetime
import decimal
import uuid

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.core.validators import MaxLengthValidator, MaxValueValidator, MinValueValidator
from django.db import models

from knowledge.models import Claim, ClaimCitation, ClaimDerivation, ClaimHead, ClaimReview, GateDecision, StoreCounter
from ledger.models import (
    Agent,
    ApiToken,
    Approval,
    AuditEntry,
    Checkpoint,
    Effect,
    Goal,
    LedgerEvent,
    ReplayEval,
    Run,
    SavedView,
    SlackIdentity,
    SsoIdentity,
    StageGeneration,
    Workflow,
)

User = get_user_model()

# (line type, model) in the order an import inserts them (each row's references come before it).
IDENTITY_TYPES = (("user", User), ("agent", Agent), ("token", ApiToken), ("slack_identity", SlackIdentity),
                  ("sso_identity", SsoIdentity))  # (approver groups are not kept: each sign-in sets them)
SYSTEM_TYPES = (("workflow", Workflow), ("goal", Goal), ("stage_generation", StageGeneration), ("run", Run),
                ("event", LedgerEvent), ("effect", Effect), ("checkpoint", Checkpoint), ("approval", Approval),
                ("audit", AuditEntry), ("replay_eval", ReplayEval), ("store_counter", StoreCounter),
                ("claim_head", ClaimHead), ("claim", Claim), ("claim_derivation", ClaimDerivation),
                ("claim_review", ClaimReview), ("gate_decision", GateDecision), ("claim_citation", ClaimCitation),
                ("saved_view", SavedView))
TYPES = dict(IDENTITY_TYPES + SYSTEM_TYPES)
USER_FIELDS = ("id", "username", "password", "email", "first_name", "last_name", "is_active", "is_staff",
               "is_superuser", "date_joined", "last_login")


class ImportRefused(Exception):
    """The file cannot be imported: why (with its line number where one line is at fault)."""


class LineInvalid(Exception):
    """A line that is not a row of its type: the field and why."""


def fields_of(model) -> list:
    if model is User:
        return [model._meta.get_field(name) for name in USER_FIELDS]
    return list(model._meta.concrete_fields)


def encode(value):
    if isinstance(value, (datetime.datetime, datetime.date)):
        return value.isoformat()
    if isinstance(value, (uuid.UUID, decimal.Decimal)):
        return str(value)
    return value


def row_line(line_type: str, obj) -> dict:
    line = {"type": line_type, **{f.attname: encode(f.value_from_object(obj)) for f in fields_of(TYPES[line_type])}}
    if line_type == "user":
        line["roles"] = sorted(group.name for group in obj.groups.all())  # (prefetched by the export)
    return line


_STORABLE = (MaxLengthValidator, MinValueValidator, MaxValueValidator)  # what the column itself would refuse


def _unstorable(value) -> str | None:
    """Why a decoded JSON value holds text no column keeps (a NUL, half of a surrogate pair), else None."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str):
            if "\x00" in item:
                return "holds a NUL character"
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return "holds half of a surrogate pair alone (not Unicode text)"
    return None


def row_from_line(line_type: str, line: dict, *, escaped: bool = True):
    """The model instance a line describes (unsaved); LineInvalid naming the field when it does not fit.
    ``escaped``: the line's text holds a ``\\u`` escape, the only way JSON carries a NUL or half a
    surrogate pair (without one, the strings need no walk)."""
    model = TYPES[line_type]
    for name, value in line.items() if escaped else ():
        problem = _unstorable(value)
        if problem:
            raise LineInvalid(f"field {name!r} {problem}")
    if line_type == "user":
        roles = line.get("roles", [])
        if not isinstance(roles, list) or not all(isinstance(r, str) and 0 < len(r) <= 150 for r in roles):
            raise LineInvalid("field 'roles' must be a list of role names")
    values = {}
    for f in fields_of(model):
        if f.attname not in line:
            if f.primary_key or not (f.null or f.has_default() or f.blank):
                raise LineInvalid(f"field {f.attname!r} is missing")
            continue
        raw = line[f.attname]
        if raw is None:
            if not f.null:
                raise LineInvalid(f"field {f.attname!r} may not be null")
            values[f.attname] = None
            continue
        if isinstance(f, models.JSONField):
            values[f.attname] = raw
            continue
        if isinstance(f, (models.IntegerField, models.AutoField, models.BigAutoField)) or (
                f.is_relation and isinstance(f.target_field, (models.IntegerField, models.AutoField))):
            if isinstance(raw, bool) or not isinstance(raw, int):
                raise LineInvalid(f"field {f.attname!r} must be an integer")
        elif isinstance(f, models.FloatField):
            if isinstance(raw, bool) or not isinstance(raw, (int, float)):
                raise LineInvalid(f"field {f.attname!r} must be a number")
        elif isinstance(f, models.BooleanField):
            if not isinstance(raw, bool):
                raise LineInvalid(f"field {f.attname!r} must be true or false")
        elif not isinstance(raw, str):
            raise LineInvalid(f"field {f.attname!r} must be a string")
        column = f.target_field if f.is_relation else f
        try:
            values[f.attname] = column.to_python(raw)
            for validator in column.validators:
                if isinstance(validator, _STORABLE):
                    validator(values[f.attname])
        except ValidationError as exc:
            raise LineInvalid(f"field {f.attname!r}: {' '.join(exc.messages)}")
        if isinstance(f, models.DateTimeField) and values[f.attname].tzinfo is None:
            raise LineInvalid(f"field {f.attname!r} must carry its timezone")
    return model(**values)


def roles_set(user, roles) -> None:
    user.groups.set([Group.objects.get_or_create(name=name)[0] for name in roles])
