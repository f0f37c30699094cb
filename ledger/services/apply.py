"""Workflows as code (SPEC §12.2): the file form of definitions, and the one apply that the command
(``manage.py apply``), the API (``POST /workflows/apply/``) and the workflow page share.

A definition is whole: the fields of ``POST /workflows/`` plus ``owner`` (a username) and ``agents``, every
omitted field at its default. Each is checked by ``workflow_validate`` (types refused, never converted) and,
against the stored one, by ``policy_version_require``. One refused definition refuses the whole apply.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field

import yaml
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from ledger import authorizers
from ledger.models import AuditEntry, Workflow
from ledger.services.audit import audit_record
from ledger.services.workflows import (
    WRITABLE,
    definition_shape,
    policy_bump_audit,
    policy_version_require,
    schedules_sync,
    workflow_build,
    workflow_insert,
    workflow_validate,
)
from stateboard.canonical import canonical_json, jsonb_float
from stateboard.errors import DomainError, Invalid, ParseFailed, decode_json_body
from stateboard.roles import OWNER, actor_for, has_role

SYSTEM_ACTOR = "system:apply"
FILE_FIELDS = ("slug", "title", "owner", *(name for name in WRITABLE if name != "title"))
PRUNE = ("", "apply", "all")  # none; what the same actor applied last; every workflow the caller owns


@dataclass
class Outcome:
    """What apply did (or, in a dry run, would do) to one workflow."""

    workflow: str
    result: str  # created | changed | unchanged | archived | restored
    changes: dict = field(default_factory=dict)  # {field: {"old": value, "new": value}}

    def as_dict(self) -> dict:
        return {"workflow": self.workflow, "result": self.result, "changes": self.changes}


# ---------------------------------------------------------------- the file form

def definition_of(workflow: Workflow, *, executors: bool = True) -> dict:
    """A stored workflow as the definition ``apply`` takes back unchanged (``executors`` left out when the
    reader may not see them)."""
    body = {"slug": workflow.slug, **_stored(workflow)}
    body["owner"] = workflow.owner.get_username() if workflow.owner_id else None
    if not executors:
        body.pop("executors")
    return {name: body[name] for name in FILE_FIELDS if name in body}


class _FileDumper(yaml.SafeDumper):
    """Every string value double-quoted (``"1.10"`` stays a string); keys plain where YAML reads them back as
    the same string; never an alias (``apply`` refuses them)."""

    def ignore_aliases(self, data) -> bool:
        return True


def _quoted(dumper, value: str):
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style='"')


_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


def _mapping(dumper, value: dict):
    node = dumper.represent_mapping("tag:yaml.org,2002:map", value.items())
    for key, _ in node.value:
        if _PLAIN_KEY.match(key.value):
            key.style = None  # the emitter still quotes a key that would read back as another type (yes, null)
    return node


def _sequence(dumper, value: list):
    flow = all(not isinstance(item, (dict, list)) for item in value)  # ["draft", "publish"] on one line
    return dumper.represent_sequence("tag:yaml.org,2002:seq", value, flow_style=flow)


_FileDumper.add_representer(str, _quoted)
_FileDumper.add_representer(dict, _mapping)
_FileDumper.add_representer(list, _sequence)


def file_form(workflows, *, executors: bool = True) -> str:
    """The YAML file form (``workflows:`` and one definition each) that ``apply`` reads back unchanged."""
    document = {"workflows": [definition_of(w, executors=executors) for w in workflows]}
    return yaml.dump(document, Dumper=_FileDumper, sort_keys=False, allow_unicode=True, width=1 << 20,
                     default_flow_style=False)


class _StrictLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping (the safe loader keeps the last) and any
    alias (``*name``, ``<<: *name``): a few hundred bytes of nested aliases expand to billions of values."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.get_event()
            raise yaml.composer.ComposerError(None, None, f"the alias *{event.anchor} is refused: a workflows "
                                                          "file writes each value out", event.start_mark)
        return super().compose_node(parent, index)


def _unique_mapping(loader, node, deep=False):
    loader.flatten_mapping(node)
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            duplicate = key in seen
            seen.add(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(None, None, "a mapping key must be a string", key_node.start_mark)
        if duplicate:
            raise yaml.constructor.ConstructorError(None, None, f"the key {key!r} is given twice", key_node.start_mark)
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def _json_value(value, where: str):
    """``value`` if it is JSON (a YAML date, a non-string key, NaN or a NUL is refused), numbers as the
    database keeps them (``jsonb_float``)."""
    if isinstance(value, dict):
        for key in value:
            if not isinstance(key, str):
                raise Invalid("invalid_file", f"{where}: the key {key!r} is not a string (quote it).")
        return {key: _json_value(item, f"{where}.{key}") for key, item in value.items()}
    if isinstance(value, list):
        return [_json_value(item, f"{where}[{n}]") for n, item in enumerate(value)]
    if isinstance(value, float):
        if not math.isfinite(value):
            raise Invalid("invalid_file", f"{where}: {value} is not a JSON number.")
        return jsonb_float(value)
    if isinstance(value, str) and "\x00" in value:
        raise Invalid("invalid_file", f"{where}: a string holds a NUL character.")
    if value is None or isinstance(value, (str, bool, int)):
        return value
    raise Invalid("invalid_file", f"{where}: {type(value).__name__} {value!r} is not a JSON value (quote it).")


def file_parse(raw: bytes, *, json_format: bool) -> list:
    """The definitions of a file (JSON, or YAML by the safe loader): the list under ``workflows:``."""
    try:
        document = decode_json_body(raw) if json_format else yaml.load(raw.decode("utf-8"), Loader=_StrictLoader)
    except ParseFailed as exc:
        raise Invalid("invalid_file", f"Not JSON: {exc.detail}")
    except UnicodeDecodeError:
        raise Invalid("invalid_file", "The file is not UTF-8.")
    except yaml.YAMLError as exc:
        raise Invalid("invalid_file", f"Not YAML: {exc}")
    if not isinstance(document, dict) or not isinstance(document.get("workflows"), list) or set(document) - {"workflows"}:
        raise Invalid("invalid_file", "A workflows file is one mapping: `workflows:` and a list of definitions.")
    return _json_value(document["workflows"], "workflows")


# ---------------------------------------------------------------- apply

def _as_stored(value):
    """Numbers as the database keeps them (PostgreSQL's jsonb turns 1e16 into 10000000000000000, SQLite keeps the
    float), so a value read back from either compares equal to the file's."""
    if isinstance(value, dict):
        return {key: _as_stored(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_as_stored(item) for item in value]
    return jsonb_float(value) if isinstance(value, float) and math.isfinite(value) else value


def _same(a, b) -> bool:
    return canonical_json(_as_stored(a)) == canonical_json(_as_stored(b))


def _stored(workflow: Workflow) -> dict:
    """The definition's fields as they act: an empty ``schedule_intent`` is the slug."""
    return {**{name: getattr(workflow, name) for name in WRITABLE},
            "schedule_intent": workflow.schedule_intent or workflow.slug}


def _refusal(workflow: str, exc: DomainError) -> dict:
    errors = exc.extra.get("errors")
    fields = list(errors) if isinstance(errors, dict) else []
    return {"workflow": workflow, "field": fields[0] if fields else "", "code": exc.code, "detail": exc.detail,
            "status": exc.status_code}


class _Plan:
    """The definitions checked against the stored workflows (locked): outcomes, errors, and what to write."""

    def __init__(self, definitions, existing: dict[str, Workflow], owners: dict[str, object | None]):
        self.outcomes: list[Outcome] = []
        self.errors: list[dict] = []
        self.writes: list[tuple[Outcome, Workflow, Workflow | None]] = []  # (outcome, desired, stored)
        seen = set()
        for position, definition in enumerate(definitions, 1):
            name = definition.get("slug") if isinstance(definition, dict) else None
            label = name if isinstance(name, str) and name else f"#{position}"
            try:
                self._one(definition, label, seen, existing, owners)
            except DomainError as exc:
                self.errors.append(_refusal(label, exc))

    def _one(self, definition, label: str, seen: set, existing: dict, owners: dict) -> None:
        if not isinstance(definition, dict):
            raise Invalid("validation_error", "A definition is a mapping of fields.", errors={"": ["not a mapping"]})
        unknown = sorted(set(definition) - set(FILE_FIELDS))
        if unknown:
            raise Invalid("validation_error", f"Unknown fields: {', '.join(unknown)}.", errors={unknown[0]: ["unknown"]})
        if label in seen:
            raise Invalid("validation_error", "This slug is defined twice in the file.", errors={"slug": ["twice"]})
        seen.add(label)
        owner_name = definition.get("owner")
        if owner_name is not None and not isinstance(owner_name, str):
            raise Invalid("validation_error", "owner must be a username (a string) or null.", errors={"owner": [""]})
        if owner_name is not None and owner_name not in owners:
            raise Invalid("unknown_owner", f"No user {owner_name!r}.", errors={"owner": ["unknown user"]})
        if owner_name is not None and owners[owner_name] is None:
            raise Invalid("unknown_owner", f"{owner_name!r} does not hold the owner role: a workflow's owner is "
                                           "an owner.", errors={"owner": ["not an owner"]})
        desired = workflow_build(slug=definition.get("slug"), data=definition, owner=owners.get(owner_name))
        workflow_validate(desired)
        stored = existing.get(desired.slug)
        if stored is None:
            outcome = Outcome(desired.slug, "created")
        else:
            old, new = _stored(stored), _stored(desired)
            changes = {name: {"old": old[name], "new": new[name]} for name in WRITABLE if not _same(old[name], new[name])}
            if stored.owner_id != desired.owner_id:
                changes["owner"] = {"old": stored.owner.get_username() if stored.owner_id else None, "new": owner_name}
            changes = {name: changes[name] for name in FILE_FIELDS if name in changes}
            if changes:
                policy_version_require({**definition_shape(stored), "policy_version": stored.policy_version}, desired)
            result = "restored" if stored.archived_at is not None else "changed" if changes else "unchanged"
            outcome = Outcome(desired.slug, result, changes)
        self.outcomes.append(outcome)
        if outcome.result != "unchanged":
            self.writes.append((outcome, desired, stored))

    def prune(self, existing: dict[str, Workflow], prune: str, *, user, actor: str) -> None:
        """``apply``: archive what ``actor`` applied last (apply wrote it last, and the audit trail says by
        them); ``all``: what ``user`` owns (the system actor: the workflows without an owner)."""
        named = {outcome.workflow for outcome in self.outcomes}
        candidates = {slug: stored for slug, stored in existing.items()
                      if slug not in named and stored.archived_at is None and prune}
        appliers = _last_appliers(candidates) if prune == "apply" else {}
        owner_id = user.pk if user is not None else None
        for slug, stored in sorted(candidates.items()):
            if prune == "all":
                mine = stored.owner_id == owner_id
            else:
                mine = stored.written_by_apply and appliers.get(slug) == actor
            if mine:
                outcome = Outcome(slug, "archived")
                self.outcomes.append(outcome)
                self.writes.append((outcome, stored, stored))


def _last_appliers(slugs) -> dict[str, str]:
    """Who wrote each workflow last through apply: the actor of its latest ``workflow_apply`` audit entry."""
    entries = AuditEntry.objects.filter(action="workflow_apply", outcome="done", target__in=list(slugs))
    return dict(entries.order_by("at", "id").values_list("target", "actor"))


def _write(outcome: Outcome, desired: Workflow, stored: Workflow | None, *, user, actor: str, now) -> bool:
    """Write one planned outcome and its audit entry; True when beat's entries may have to follow."""
    if outcome.result == "archived":
        stored.archived_at = now
        stored.save(update_fields=["archived_at", "updated_at"])
    elif stored is None:
        desired.written_by_apply = True
        workflow_insert(desired)
    else:
        before = stored.policy_version
        for name in WRITABLE:
            setattr(stored, name, getattr(desired, name))
        stored.owner = desired.owner
        stored.archived_at, stored.written_by_apply = None, True
        stored.save()
        policy_bump_audit(user=user, actor=actor, workflow=stored, before=before, reason="apply")
    audit_record(user=user, actor=actor, action="workflow_apply", outcome="done", target=outcome.workflow,
                 data={"result": outcome.result, "changes": outcome.changes})
    workflow = stored or desired
    return bool(workflow.schedule) or "schedule" in outcome.changes


def workflows_apply(*, definitions, user=None, dry_run: bool = False, prune: str = "") -> list[Outcome]:
    """Make the workflows match ``definitions``, all or nothing; answers per workflow what changed.

    ``user``: the acting owner (None: the system actor ``system:apply``, for the command without ``--as``).
    ``prune``: "apply" archives the workflows the same actor applied last that the definitions do not name,
    "all" every one the caller owns that they do not name; nothing is ever deleted. A refusal raises the first error's code and status with
    ``errors``: every one, each with its workflow and field. ``dry_run``: the same answer, nothing written.
    """
    if user is not None:
        authorizers.may_edit_workflow(user)
    if not isinstance(definitions, list):
        raise Invalid("validation_error", "workflows must be a list of definitions.", errors={"workflows": ["a list"]})
    if prune not in PRUNE:
        raise ValueError(f"prune must be one of {PRUNE}")
    actor = actor_for(user) if user is not None else SYSTEM_ACTOR
    with transaction.atomic():
        existing = {w.slug: w for w in Workflow.objects.select_for_update(of=("self",)).select_related("owner")}
        names = {d.get("owner") for d in definitions if isinstance(d, dict) and isinstance(d.get("owner"), str)}
        users = get_user_model().objects.filter(username__in=names)
        owners = {u.get_username(): u if has_role(u, OWNER) else None for u in users}  # None: not an owner
        plan = _Plan(definitions, existing, owners)
        if plan.errors:
            first = plan.errors[0]
            raise DomainError(first["code"], f"{len(plan.errors)} definition(s) refused; nothing applied. "
                                             f"{first['workflow']}: {first['detail']}",
                              status_code=first["status"], errors=plan.errors)
        plan.prune(existing, prune, user=user, actor=actor)
        if dry_run:
            return plan.outcomes
        now = timezone.now()
        sync = [_write(outcome, desired, stored, user=user, actor=actor, now=now)
                for outcome, desired, stored in plan.writes]
        if any(sync):
            schedules_sync()
    return plan.outcomes


def outcome_lines(outcomes: list[Outcome]) -> list[str]:
    """What the command prints: one line per workflow, then each changed field's old → new value."""
    lines = []
    for outcome in outcomes:
        lines.append(f"{outcome.result:<10} {outcome.workflow}")
        for name, change in outcome.changes.items():
            old, new = (json.dumps(change[k], ensure_ascii=False, sort_keys=True) for k in ("old", "new"))
            lines.append(f"  {name}: {old} → {new}")
    return lines
