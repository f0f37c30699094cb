"""What the ledger's API views share: pagination, input validation, the run of a path, and the pieces
their policies name (the subject an authorizer decides on, the workflows whose ``agents`` apply)."""

from __future__ import annotations

from datetime import UTC, datetime

from django.core.exceptions import ValidationError as DjangoValidationError
from django.utils import timezone
from rest_framework import serializers
from rest_framework.exceptions import NotFound as NotFound_
from rest_framework.generics import ListAPIView
from rest_framework.pagination import CursorPagination

from ledger import selectors
from ledger.models import Approval, Run
from ledger.services import refusal_audit
from ledger.store import store
from stateboard.errors import Invalid, NotFound
from stateboard.policy import PolicyApi, request_data, request_field


class PolicyListApi(PolicyApi, ListAPIView):
    """A paginated, filtered list behind the same pipeline."""


def _invalid_cursor() -> Invalid:
    return Invalid("invalid_cursor", "The pagination cursor is not one this list gave out.", status_code=400)


class StrictCursor(CursorPagination):
    """A cursor that does not decode, or whose position is not a value of the ordering's field (a forged
    ``p``: text for a time, a number past the column, a NUL), is 400 ``invalid_cursor`` (DRF answers 404,
    or the database's error a 500)."""

    def paginate_queryset(self, queryset, request, view=None):
        self.position_field = queryset.model._meta.get_field(self.ordering[0].lstrip("-"))
        return super().paginate_queryset(queryset, request, view)

    def decode_cursor(self, request):
        try:
            cursor = super().decode_cursor(request)
        except NotFound_:
            raise _invalid_cursor()
        if cursor is not None and cursor.position is not None:
            _position_check(self.position_field, cursor.position)
        return cursor


def _position_check(field, position: str) -> None:
    """400 ``invalid_cursor`` unless ``position`` is a value of ``field`` the database can compare: within
    the column's range, and a time with its zone that UTC can hold."""
    if "\x00" in position:
        raise _invalid_cursor()
    try:
        value = field.to_python(position)
        field.run_validators(value)
        comparable = not isinstance(value, datetime) or (timezone.is_aware(value) and bool(value.astimezone(UTC)))
    except (DjangoValidationError, ValueError, TypeError, OverflowError):
        comparable = False
    if not comparable:
        raise _invalid_cursor()


class NewestFirstCursor(StrictCursor):
    ordering = ("-created_at", "-id")
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500


class SeqCursor(StrictCursor):
    ordering = ("seq",)
    page_size = 200
    page_size_query_param = "page_size"
    max_page_size = 1000


def json_object(data) -> dict:
    if not isinstance(data, dict):
        raise Invalid("validation_error", "The body must be a JSON object.")
    return data


def body_of(request) -> dict:
    return json_object(request.data)


def validated(serializer_class, data, *, strict: bool = False) -> dict:
    """``data`` (a JSON object) validated by an input serializer, or 422 ``validation_error`` with its errors.
    A text field given anything but a string is refused, never converted (DRF turns 9 into "9");
    ``strict``: a field the serializer does not know is 422 ``unknown_field`` (other bodies ignore them)."""
    serializer = serializer_class(data=json_object(data))
    unknown = sorted(set(data) - set(serializer.fields)) if strict else []
    if unknown:
        raise Invalid("unknown_field", f"Unknown field {unknown[0]!r}; this body takes "
                                       f"{', '.join(serializer.fields)}.",
                      errors={name: ["Unknown field."] for name in unknown})
    not_text = dict(_not_strings(serializer, data, ""))
    if not_text:
        raise Invalid("validation_error", "Invalid input: a text field holds a value that is not a string.",
                      errors=not_text)
    if not serializer.is_valid():
        raise Invalid("validation_error", "Invalid input.", errors=serializer.errors)
    return serializer.validated_data


def _not_strings(field, value, where: str):
    """(where, why) for each value under ``field`` that is not a string where the field takes text."""
    if value is None:
        return
    if isinstance(field, serializers.CharField):  # (SlugField, RegexField, … too)
        if not isinstance(value, str):
            yield where, ["Must be a string."]
    elif isinstance(field, (serializers.ListField, serializers.ListSerializer)) and isinstance(value, list):
        for n, item in enumerate(value):
            yield from _not_strings(field.child, item, f"{where}[{n}]")
    elif isinstance(field, serializers.DictField) and isinstance(value, dict):
        for key, item in value.items():
            yield from _not_strings(field.child, item, f"{where}.{key}")
    elif isinstance(field, serializers.Serializer) and isinstance(value, dict):
        for name, child in field.fields.items():
            if name in value and not child.read_only:
                yield from _not_strings(child, value[name], f"{where}.{name}" if where else name)


def run_get(run_id) -> Run:
    """The run of a ``<uuid:run_id>`` path (a malformed id never reaches the view: 404 ``not_found``)."""
    try:
        return selectors.run_by_id(run_id)
    except Run.DoesNotExist:
        raise NotFound("run_not_found", f"No run with id {run_id}.")


# ---------------------------------------------------------------- what policies name

def run_of_path(request, kwargs) -> Run:
    return run_get(kwargs["run_id"])


def approval_of_path(request, kwargs) -> Approval:
    try:
        return selectors.approval_get(approval_id=kwargs["approval_id"])
    except Approval.DoesNotExist:
        raise NotFound("approval_not_found", f"No approval with id {kwargs['approval_id']}.")


def _agents_of(slugs) -> list[list[str]]:
    return list(store().workflows_agents(slugs).values())


def run_peek_of(request, kwargs) -> Run | None:
    """The path's run with its workflow, read once per request without a lock (None: no such run): the
    pipeline's ``agents`` check reads it, and a run-scoped write starts from it (``event_append(run=…)``)."""
    if not hasattr(request, "run_peek"):
        request.run_peek = store().run_peek(kwargs["run_id"])
    return request.run_peek


def run_intent_of(request, kwargs) -> str | None:
    run = run_peek_of(request, kwargs)
    return run.intent if run is not None else None


def agents_of_run(request, kwargs) -> list[list[str]]:
    """The allow-list of the path's run's workflow (a run that does not exist: none; the service says 404)."""
    run = run_peek_of(request, kwargs)
    return [run.workflow.agents] if run is not None and run.workflow.agents else []


def agents_of_slug(request, kwargs) -> list[list[str]]:
    return _agents_of([kwargs["slug"]])


def agents_of_body_workflow(request, kwargs) -> list[list[str]]:
    """The allow-list of the workflow a trigger names (a body that names none: none; validation says why)."""
    slug = request_field(request, "workflow")
    return _agents_of([slug]) if slug else []


def lease_workflows_of(request) -> dict[str, list[str]]:
    """The workflows a lease names, as {slug: agents} of those that exist, read once per request."""
    if not hasattr(request, "lease_workflows"):
        data = request_data(request)
        slugs = data.get("workflows") if isinstance(data, dict) else None
        if not isinstance(slugs, list) or not slugs or not all(isinstance(s, str) for s in slugs):
            request.lease_workflows = {}
        else:
            request.lease_workflows = store().workflows_agents(slugs)
    return request.lease_workflows


def agents_of_lease(request, kwargs) -> list[list[str]]:
    """A lease naming workflows is refused if any refuses the caller; naming none skips them instead."""
    return list(lease_workflows_of(request).values())


def refusal_record(user, *, action: str, code: str, request, kwargs: dict, errors=None, actor: str = "") -> None:
    """``stateboard.policy.refusal_recorder``: what was refused, named by the path (else the body's key or
    workflow), recorded by ``services.audit.refusal_audit``."""
    target = kwargs.get("key") or kwargs.get("slug") or kwargs.get("name") or request_field(request, "key") \
        or request_field(request, "workflow")
    refusal_audit(user=user, action=action, code=code, run_id=kwargs.get("run_id"),
                  approval_id=kwargs.get("approval_id"), target=str(target), reason=request_field(request, "reason"),
                  errors=errors, actor=actor)


class ReasonInputSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")
