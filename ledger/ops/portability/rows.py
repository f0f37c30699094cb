"""Model rows as export lines and back: every concrete field by its column name, ids kept."""

from __future__ import annotations

import datetime
import decimal
import uuid

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.db import models

from knowledge.models import (Claim, ClaimCitation, ClaimDerivation, ClaimHead, ClaimReview, GateDecision,
                              StoreCounter)
from ledger.models import (Agent, ApiToken, Approval, AuditEntry, Checkpoint, Effect, Goal, LedgerEvent,
                           ReplayEval, Run, StageGeneration, Workflow)

User = get_user_model()

# (line type, model) in the order an import inserts them (each row's references come before it).
IDENTITY_TYPES = (("user", User), ("agent", Agent), ("token", ApiToken))
SYSTEM_TYPES = (("workflow", Workflow), ("goal", Goal), ("stage_generation", StageGeneration), ("run", Run),
                ("event", LedgerEvent), ("effect", Effect), ("checkpoint", Checkpoint), ("approval", Approval),
                ("audit", AuditEntry), ("replay_eval", ReplayEval), ("store_counter", StoreCounter),
                ("claim_head", ClaimHead), ("claim", Claim), ("claim_derivation", ClaimDerivation),
                ("claim_review", ClaimReview), ("gate_decision", GateDecision), ("claim_citation", ClaimCitation))
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


def row_from_line(line_type: str, line: dict):
    """The model instance a line describes (unsaved); LineInvalid naming the field when it does not fit."""
    model = TYPES[line_type]
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
        try:
            values[f.attname] = (f.target_field if f.is_relation else f).to_python(raw)
        except ValidationError as exc:
            raise LineInvalid(f"field {f.attname!r}: {' '.join(exc.messages)}")
        if isinstance(f, models.DateTimeField) and values[f.attname].tzinfo is None:
            raise LineInvalid(f"field {f.attname!r} must carry its timezone")
    return model(**values)


def roles_set(user, roles) -> None:
    user.groups.set([Group.objects.get_or_create(name=name)[0] for name in roles])
