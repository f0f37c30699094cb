"""``import_ledger``: a complete export into an empty database, one transaction, trusting nothing (SPEC §11.2).

Refused — with the line, the field and both values where a value differs, and nothing written — unless
the signature verifies (or ``trust_unsigned`` and there is none: identities are then not imported),
every line is a row of its type, every chain verifies from seq 1, and what the ledger determines
(``checks``) equals what the file says. Ids are kept and every sequence continues past them.
"""

from __future__ import annotations

import contextlib
import json
from collections import defaultdict

from django.core.management.color import no_style
from django.db import DataError, IntegrityError, connection, transaction

import ledger.portability.checks as checks
import ledger.portability.signing as signing
from knowledge.models import Claim
from ledger.domain.usage import micro_usd, spend_day
from ledger.models import AuditEntry, BudgetEscalation, EffectKey, Goal, Run, SavedView, Workflow, WorkflowDaySpend
from ledger.portability.export import FORMAT
from ledger.portability.rows import (
    IDENTITY_TYPES,
    SYSTEM_TYPES,
    TYPES,
    ImportRefused,
    LineInvalid,
    User,
    roles_set,
    row_from_line,
)
from ledger.services import audit_record


def _lines(data: bytes) -> list[tuple[int, bytes]]:
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return [(number, line) for number, line in enumerate(lines, 1)]


def _parsed(number: int, raw: bytes) -> dict:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ImportRefused(f"line {number}: not UTF-8 ({exc.reason} at byte {exc.start})")
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ImportRefused(f"line {number}: not JSON ({str(exc)[:120]})")
    if not isinstance(obj, dict):
        raise ImportRefused(f"line {number}: not a JSON object")
    if not isinstance(obj.get("type"), str):
        raise ImportRefused(f"line {number}: no type")
    return obj


def _target_empty() -> None:
    for model in (Workflow, Run, EffectKey, Claim, Goal, AuditEntry, SavedView, User):
        if model.objects.exists():
            raise ImportRefused(f"the database is not empty ({model._meta.verbose_name_plural} exist): "
                                "import_ledger loads into an empty database only")


def import_file(data: bytes, *, trust_unsigned: bool = False) -> dict:
    """Load the export ``data`` (its exact bytes); answers the rows imported per type."""
    lines = _lines(data)
    if not lines:
        raise ImportRefused("line 1: the file is empty")
    head = _parsed(*lines[0])
    if head.get("type") != "export":
        raise ImportRefused("line 1: not an export (the first line is {\"type\": \"export\", \"format\": 2})")
    if head.get("format") == "partial":
        raise ImportRefused("export_partial: an inspection file (--since/--until) is not the whole system")
    if head.get("format") != FORMAT:
        raise ImportRefused(f"line 1: format {head.get('format')!r} is not {FORMAT}")
    number, last = lines[-1]
    tail = _parsed(number, last) if len(lines) > 1 else {}
    signed = tail.get("type") == "signature"
    if signed:
        body = b"".join(raw + b"\n" for _, raw in lines[:-1])
        if tail.get("alg") != "HMAC-SHA256" or not isinstance(tail.get("hmac"), str) \
                or not signing.verifies(body, tail["hmac"]):
            raise ImportRefused(f"export_signature_invalid: line {number}: the signature does not verify "
                                "(another key, or the file was changed)")
    elif not trust_unsigned:
        raise ImportRefused("export_unsigned: the file has no signature line; --trust-unsigned imports it "
                            "without its identities")
    rows = defaultdict(list)
    run_intents = {}
    for number, raw in lines[1:-1] if signed else lines[1:]:
        obj = _parsed(number, raw)
        line_type = obj.pop("type")
        if line_type not in TYPES:
            raise ImportRefused(f"line {number}: unknown type {line_type!r}")
        if line_type == "event" and "intent" not in obj:  # files from before events carried it
            obj["intent"] = run_intents.get(obj.get("run_id"), "")
        try:
            row = row_from_line(line_type, obj, escaped=b"\\u" in raw)
        except LineInvalid as exc:
            raise ImportRefused(f"line {number} ({line_type}): {exc}")
        rows[line_type].append((number, row, obj))
        if line_type == "run":
            run_intents[obj.get("id")] = row.intent
    if not signed:
        for line_type, _ in IDENTITY_TYPES:
            rows.pop(line_type, None)
    with transaction.atomic():
        _target_empty()
        checks.verify(rows, identities=signed)
        if not signed:
            checks.forget_identities(rows)
        counts = _insert(rows)
        _spend_rebuild(rows)
        if not signed:
            audit_record(user=None, action="import_unsigned", outcome="done",
                         reason="imported with --trust-unsigned: no identities", data=counts)
    return counts


@contextlib.contextmanager
def _times_as_given(models):
    """Rows keep their times: ``auto_now``/``auto_now_add`` fields take the file's value, not the clock's."""
    fields = [(f, f.auto_now, f.auto_now_add) for model in models for f in model._meta.concrete_fields
              if getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False)]
    for f, _, _ in fields:
        f.auto_now = f.auto_now_add = False
    try:
        yield
    finally:
        for f, auto_now, auto_now_add in fields:
            f.auto_now, f.auto_now_add = auto_now, auto_now_add


def _insert(rows: dict) -> dict:
    with _times_as_given([model for _, model in IDENTITY_TYPES + SYSTEM_TYPES]):
        return _insert_rows(rows)


def _insert_rows(rows: dict) -> dict:
    counts = {}
    for line_type, model in IDENTITY_TYPES + SYSTEM_TYPES:
        found = rows.get(line_type, [])
        try:
            with transaction.atomic():
                if line_type == "effect":  # an effect's key is claimed with it (ledger.models.keys)
                    EffectKey.objects.bulk_create([EffectKey(idempotency_key=row.idempotency_key, intent=row.intent)
                                                   for _, row, _ in found], batch_size=2000)
                model.objects.bulk_create([row for _, row, _ in found], batch_size=2000)
        except (IntegrityError, DataError) as exc:  # (DataError: a value the checks of each line let through)
            raise ImportRefused(f"{line_type}: the rows do not fit together ({str(exc).splitlines()[0][:200]})")
        if line_type == "user":
            for _, user, line in found:
                roles_set(user, line.get("roles") or [])
        counts[line_type] = len(found)
    statements = connection.ops.sequence_reset_sql(no_style(), [m for _, m in IDENTITY_TYPES + SYSTEM_TYPES])
    with connection.cursor() as cursor:
        for statement in statements:
            cursor.execute(statement)
    return {k: v for k, v in counts.items() if v}


def _spend_rebuild(rows: dict) -> None:
    """SPEC §16: what the appends keep beside the ledger, rebuilt from it: each workflow's spend per UTC day (its
    events' usage) and the day budget's one escalation (the run decided ``escalated`` / ``budget_exhausted``)."""
    workflow_of = {run.id: run.workflow_id for _, run, _ in rows.get("run", [])}
    days, escalations = defaultdict(lambda: [0, 0, 0]), {}
    for _, event, _ in rows.get("event", []):
        key = (workflow_of[event.run_id], spend_day(event.at))
        if event.usage:
            spent = days[key]
            spent[0] += event.usage.get("input_tokens", 0)
            spent[1] += event.usage.get("output_tokens", 0)
            spent[2] += micro_usd(event.usage.get("cost_usd", "0"))
        data = event.data if isinstance(event.data, dict) else {}
        if event.kind == "decided" and event.reason_code == "budget_exhausted" and data.get("outcome") == "escalated":
            escalations.setdefault(key, BudgetEscalation(workflow_id=key[0], day=key[1], run_id=event.run_id,
                                                         intent=event.intent, created_at=event.at))
    WorkflowDaySpend.objects.bulk_create([
        WorkflowDaySpend(workflow_id=workflow_id, day=day, input_tokens=spent[0], output_tokens=spent[1],
                         cost_micro_usd=spent[2]) for (workflow_id, day), spent in days.items()], batch_size=2000)
    BudgetEscalation.objects.bulk_create(list(escalations.values()), batch_size=2000)
