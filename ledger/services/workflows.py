"""Workflow definitions: create and update (owners), validated and audited in one place.

The API and any other writer (admin, demo) go through these; a schedule change reaches beat through
its PeriodicTask rows once the transaction commits (django-celery-beat picks changes up without restart).
"""

from __future__ import annotations

from django.conf import settings
from django.db import IntegrityError, transaction

from ledger import authorizers
from ledger.ops.executor import HandlerConfigError, handler_for
from ledger.models import Workflow
from ledger.ops.schedules import periodic_tasks_ensure, schedule_problem
from ledger.services.audit import audit_record
from stateboard.errors import Conflict, Invalid, NotFound

MAX_SECONDS = 31_536_000
DURATIONS = ("checkpoint_ttl_seconds", "lease_seconds", "approval_ttl_seconds")
POLICY_FIELDS = ("stages", "effect_stages", "approval_stages", "policy_version", "max_retries", *DURATIONS,
                 "schedule", "schedule_intent", "schedule_inputs", "executors", "knowledge_scope", "agents")
WRITABLE = ("title", *POLICY_FIELDS)


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


def workflow_validate(workflow: Workflow) -> None:
    """Every rule a definition must satisfy (the one home of them; callers set the fields first)."""
    stages = workflow.stages
    if not isinstance(stages, list) or not stages or not all(isinstance(s, str) and s for s in stages):
        _refuse("stages", "stages must be a non-empty list of names.")
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
    if not isinstance(workflow.schedule, str):
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


def _after_commit_sync(schedule_changed: bool) -> None:
    if schedule_changed:
        transaction.on_commit(periodic_tasks_ensure)


@transaction.atomic
def workflow_create(*, user, data: dict) -> Workflow:
    """A new workflow owned by ``user``; a slug taken (also by a concurrent create) is 409 ``workflow_exists``."""
    authorizers.may_edit_workflow(user)
    slug = data.get("slug")
    workflow = Workflow(slug=slug, owner=user)
    if "stages" in data and "effect_stages" not in data:
        workflow.effect_stages = [s for s in workflow.effect_stages if s in data["stages"]]
    if "stages" in data and "approval_stages" not in data:
        workflow.approval_stages = [s for s in workflow.approval_stages if s in data["stages"]]
    for name in WRITABLE:
        if name in data:
            setattr(workflow, name, data[name])
    workflow.schedule_intent = workflow.schedule_intent or slug
    workflow_validate(workflow)
    if Workflow.objects.filter(slug=slug).exists():
        raise Conflict("workflow_exists", f"A workflow {slug!r} already exists.")
    try:
        with transaction.atomic():
            workflow.save(force_insert=True)
    except IntegrityError:  # a concurrent create took the slug between the check and the insert
        raise Conflict("workflow_exists", f"A workflow {slug!r} already exists.")
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
    for name in WRITABLE:
        if name in data:
            setattr(workflow, name, data[name])
    workflow.schedule_intent = workflow.schedule_intent or workflow.slug
    workflow_validate(workflow)
    workflow.save()
    if workflow.policy_version != before["policy_version"]:
        audit_record(user=user, action="policy_bump", outcome="done", target=workflow.slug, reason=reason,
                     data={"from": before["policy_version"], "to": workflow.policy_version})
    _after_commit_sync(workflow.schedule != before["schedule"])
    return workflow
