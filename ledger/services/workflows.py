"""Workflow definitions: create and update (owners), validated and audited in one place.

The API and any other writer (admin, demo) go through these; a schedule change reaches beat through
its PeriodicTask rows once the transaction commits (django-celery-beat picks changes up without restart).
"""

from __future__ import annotations

import re

from django.conf import settings
from django.db import IntegrityError, transaction

from ledger import authorizers
from ledger.domain.alerts import alerts_problem
from ledger.domain.approval_rules import RulesInvalid, rules_checked, schema_problem
from ledger.executor import HandlerConfigError, handler_for
from ledger.models import Workflow
from ledger.schedules import periodic_tasks_ensure, schedule_problem
from ledger.services.audit import audit_record
from ledger.services.spend import budget_valid
from stateboard.errors import Conflict, Invalid, NotFound

MAX_SECONDS = 31_536_000
DURATIONS = ("checkpoint_ttl_seconds", "lease_seconds", "approval_ttl_seconds")
POLICY_FIELDS = ("stages", "effect_stages", "approval_stages", "policy_version", "max_retries", *DURATIONS,
                 "schedule", "schedule_intent", "schedule_inputs", "executors", "knowledge_scope", "agents", "alerts",
                 "budget", "approval_rules")
WRITABLE = ("title", *POLICY_FIELDS)
# What a run's checkpoints and effect keys were made under: changing it needs another policy_version.
DEFINITION_SHAPE = ("stages", "effect_stages", "approval_stages", "executor handlers")
_SLUG = re.compile(r"^[-a-zA-Z0-9_]+$")


def _refuse(field: str, message: str, code: str = "validation_error"):
    raise Invalid(code, message, errors={field: [message]})


def _integer(name: str, value, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        _refuse(name, f"{name} must be an integer from {low} to {high:,}.")


def _executors_validate(executors, workflow: Workflow) -> None:
    if not isinstance(executors, dict):
        _refuse("executors", "executors must be an object {stage: {handler, config}}.", "invalid_executors")
    for stage, spec in executors.items():
        if stage not in workflow.effect_stages:
            _refuse("executors", f"{stage!r} is not an effect stage of this workflow.", "invalid_executors")
        if not isinstance(spec, dict) or set(spec) - {"handler", "config"} or not isinstance(spec.get("handler"), str) \
                or not isinstance(spec.get("config", {}), dict):
            _refuse("executors", f"executors[{stage!r}] must be {{handler, config}}.", "invalid_executors")
        try:
            handler = handler_for(spec["handler"], spec.get("config") or {})
        except HandlerConfigError as exc:
            _refuse("executors", f"executors[{stage!r}]: {exc}", "invalid_executors")
        prefix = secret_env_prefix(workflow.slug)
        if handler.secret_env is not None and not handler.secret_env.startswith(prefix):
            _refuse("executors", f"executors[{stage!r}]: secret_env must name a variable {prefix}… (a workflow "
                                 "signs with its own secrets only).", "secret_env_not_allowed")
        if handler.timeout_seconds >= workflow.lease_seconds:
            _refuse("executors", f"executors[{stage!r}]: the handler's timeout must be below lease_seconds.",
                    "invalid_executors")
        if handler.timeout_seconds >= settings.CELERY_TASK_SOFT_TIME_LIMIT:
            _refuse("executors", f"executors[{stage!r}]: the handler's timeout must be below the task time limit "
                                 f"({settings.CELERY_TASK_SOFT_TIME_LIMIT} s).", "invalid_executors")


def secret_env_prefix(slug: str) -> str:
    """The environment variables a workflow's executors may read (SPEC §11.4)."""
    return f"STATEBOARD_SECRET_{slug.upper().replace('-', '_')}_"


def _slug(value) -> bool:
    return isinstance(value, str) and 0 < len(value) <= 100 and _SLUG.match(value) is not None


def workflow_validate(workflow: Workflow) -> None:
    """Every rule a definition must satisfy (the one home of them; callers set the fields first). Types are
    checked, never converted: ``policy_version: 1.10`` (a number) is refused."""
    if not _slug(workflow.slug):
        _refuse("slug", "slug must be a string of at most 100 letters, digits, '-' or '_'.")
    if not isinstance(workflow.title, str) or len(workflow.title) > 200:
        _refuse("title", "title must be a string of at most 200 characters.")
    if not isinstance(workflow.policy_version, str) or not 0 < len(workflow.policy_version) <= 100:
        _refuse("policy_version", "policy_version must be a non-empty string of at most 100 characters "
                                  "(quote it in YAML: \"1.10\").")
    stages = workflow.stages
    if not isinstance(stages, list) or not stages or not all(_slug(s) for s in stages):
        _refuse("stages", "stages must be a non-empty list of names (letters, digits, '-' or '_').")
    if len(set(stages)) != len(stages):
        _refuse("stages", "Stage names must be unique.")
    for name in ("effect_stages", "approval_stages"):
        listed = getattr(workflow, name)
        if not isinstance(listed, list) or not all(isinstance(s, str) for s in listed):
            _refuse(name, f"{name} must be a list of stage names.")
        if set(listed) - set(stages):
            _refuse(name, f"Unknown stages: {sorted(set(listed) - set(stages))}.")
    _integer("max_retries", workflow.max_retries, 1, 100)
    for name in DURATIONS:
        _integer(name, getattr(workflow, name), 1, MAX_SECONDS)
    if not isinstance(workflow.schedule, str) or len(workflow.schedule) > 100:
        _refuse("schedule", "schedule must be a cron string.", "invalid_schedule")
    if workflow.schedule:
        problem = schedule_problem(workflow.schedule)
        if problem:
            _refuse("schedule", problem, "invalid_schedule")
    if not isinstance(workflow.schedule_intent, str) or len(workflow.schedule_intent) > 500:
        _refuse("schedule_intent", "schedule_intent must be a string of at most 500 characters.")
    if not isinstance(workflow.schedule_inputs, dict):
        _refuse("schedule_inputs", "schedule_inputs must be a JSON object.")
    scope = workflow.knowledge_scope
    if not isinstance(scope, dict) or set(scope) - {"system", "task"} or not all(
            isinstance(v, str) for v in scope.values()):
        _refuse("knowledge_scope", "knowledge_scope must be an object {system?, task?} of strings.",
                "invalid_knowledge_scope")
    agents = workflow.agents
    if not isinstance(agents, list) or not all(isinstance(a, str) and 0 < len(a) <= 150 for a in agents) \
            or len(agents) > 1000:
        _refuse("agents", "agents must be a list of agent names (empty: every agent).")
    _executors_validate(workflow.executors, workflow)
    _alerts_validate(workflow)
    budget_valid(workflow.budget)  # (SPEC §16: 422 invalid_budget; a change needs no policy bump)
    _approval_rules_validate(workflow)


def _alerts_validate(workflow: Workflow) -> None:
    """SPEC §14: 422 ``invalid_alert`` naming the rule and the field (after the durations it reads)."""
    problem = alerts_problem(workflow.alerts, stages=workflow.stages, lease_seconds=workflow.lease_seconds,
                             cron_problem=schedule_problem)
    if problem:
        rule, field, message = problem
        detail = f"alerts[{rule}].{field}: {message}" if rule else message
        raise Invalid("invalid_alert", detail, errors={"alerts": [detail]}, rule=rule, field=field)


def _approval_rules_validate(workflow: Workflow) -> None:
    """SPEC §17: 422 ``invalid_approval_rules`` naming the stage and the field (after the stages it reads)."""
    try:
        rules_checked(workflow.approval_rules, stages=workflow.stages, approval_stages=workflow.approval_stages,
                      schema_problem=schema_problem)
    except RulesInvalid as invalid:
        detail = f"approval_rules[{invalid.stage}].{invalid.field}: {invalid.message}" if invalid.stage \
            else invalid.message
        raise Invalid("invalid_approval_rules", detail, errors={"approval_rules": [detail]}, stage=invalid.stage,
                      field=invalid.field)


def executor_handlers(executors) -> dict:
    """{stage: handler name} of a definition's executors (what its effects are performed by)."""
    if not isinstance(executors, dict):
        return {}
    return {stage: spec.get("handler") if isinstance(spec, dict) else None for stage, spec in executors.items()}


def definition_shape(workflow: Workflow) -> dict:
    return {"stages": workflow.stages, "effect_stages": workflow.effect_stages,
            "approval_stages": workflow.approval_stages, "executor handlers": executor_handlers(workflow.executors)}


def policy_version_require(before: dict, workflow: Workflow) -> None:
    """A change of stages, effect or approval stages, or of which stages have executors and their handler,
    needs a different ``policy_version`` (409 ``policy_version_required``): old checkpoints and effect keys
    would be taken for the new definition. An executor's ``config`` may change freely. ``before`` is
    ``definition_shape`` of the stored definition with its ``policy_version``. The one home of the rule
    (PATCH and apply call it)."""
    after = definition_shape(workflow)
    changed = [name for name in DEFINITION_SHAPE if before[name] != after[name]]
    if changed and before["policy_version"] == workflow.policy_version:
        detail = (f"Changing {', '.join(changed)} needs a different policy_version (it is still "
                  f"{workflow.policy_version!r}): old checkpoints and effect keys would be taken for the new definition.")
        raise Conflict("policy_version_required", detail, errors={"policy_version": [detail]}, changed=changed)


def policy_bump_audit(*, user, workflow: Workflow, before: str, reason: str = "", actor: str = "") -> None:
    """The policy history's entry (the workflow page reads it) when ``policy_version`` changed."""
    if workflow.policy_version != before:
        audit_record(user=user, actor=actor, action="policy_bump", outcome="done", target=workflow.slug,
                     reason=reason, data={"from": before, "to": workflow.policy_version})


def workflow_build(*, slug, data: dict, owner=None) -> Workflow:
    """A new, unsaved workflow from ``data`` (the fields of ``POST /workflows/``), every omitted field at its
    default (effect and approval stages default to the default ones among ``stages``)."""
    workflow = Workflow(slug=slug, owner=owner)
    stages = data.get("stages")
    if isinstance(stages, list) and "effect_stages" not in data:
        workflow.effect_stages = [s for s in workflow.effect_stages if s in stages]
    if isinstance(stages, list) and "approval_stages" not in data:
        workflow.approval_stages = [s for s in workflow.approval_stages if s in stages]
    for name in WRITABLE:
        if name in data:
            setattr(workflow, name, data[name])
    workflow.schedule_intent = workflow.schedule_intent or slug
    return workflow


def workflow_insert(workflow: Workflow) -> None:
    """Save a new workflow; a slug taken (also by a concurrent create) is 409 ``workflow_exists``."""
    if Workflow.objects.filter(slug=workflow.slug).exists():
        raise Conflict("workflow_exists", f"A workflow {workflow.slug!r} already exists.")
    try:
        with transaction.atomic():
            workflow.save(force_insert=True)
    except IntegrityError:  # a concurrent create took the slug between the check and the insert
        raise Conflict("workflow_exists", f"A workflow {workflow.slug!r} already exists.")


def schedules_sync() -> None:
    """Beat's entries follow the workflows once the transaction commits."""
    transaction.on_commit(periodic_tasks_ensure)


def _after_commit_sync(schedule_changed: bool) -> None:
    if schedule_changed:
        schedules_sync()


@transaction.atomic
def workflow_create(*, user, data: dict) -> Workflow:
    """A new workflow owned by ``user``; a slug taken (also by a concurrent create) is 409 ``workflow_exists``."""
    authorizers.may_edit_workflow(user)
    workflow = workflow_build(slug=data.get("slug"), data=data, owner=user)
    workflow_validate(workflow)
    workflow_insert(workflow)
    _after_commit_sync(bool(workflow.schedule))
    return workflow


@transaction.atomic
def workflow_update(*, user, slug: str, data: dict, reason: str = "") -> Workflow:
    """Change a workflow's definition; a policy bump is audited, a schedule change reaches beat."""
    authorizers.may_edit_workflow(user)
    workflow = Workflow.objects.select_for_update(of=("self",)).select_related("owner").filter(slug=slug).first()
    if workflow is None:
        raise NotFound("workflow_not_found", f"No workflow {slug!r}.")
    before = {name: getattr(workflow, name) for name in WRITABLE}
    shape = {**definition_shape(workflow), "policy_version": workflow.policy_version}
    for name in WRITABLE:
        if name in data:
            setattr(workflow, name, data[name])
    workflow.schedule_intent = workflow.schedule_intent or workflow.slug
    workflow_validate(workflow)
    policy_version_require(shape, workflow)
    workflow.written_by_apply = False  # `apply --prune` leaves a workflow the API wrote last alone
    workflow.save()
    policy_bump_audit(user=user, workflow=workflow, before=before["policy_version"], reason=reason)
    _after_commit_sync(workflow.schedule != before["schedule"])
    return workflow
