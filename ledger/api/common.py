"""What the ledger's API views share: pagination, input validation, the run of a path, and the pieces
their policies name (the subject an authorizer decides on, the workflows whose ``agents`` apply)."""

from __future__ import annotations

from django.db import transaction
from rest_framework import serializers
from rest_framework.exceptions import NotFound as NotFound_
from rest_framework.generics import ListAPIView
from rest_framework.pagination import CursorPagination

from ledger import selectors
from ledger.models import Approval, Run, RunKey, Workflow
from ledger.services.audit import audit_record
from stateboard.errors import Invalid, NotFound
from stateboard.policy import PolicyApi, request_data, request_field


class PolicyListApi(PolicyApi, ListAPIView):
    """A paginated, filtered list behind the same pipeline."""


class StrictCursor(CursorPagination):
    """A cursor that does not decode is 400 ``invalid_cursor`` (DRF answers 404)."""

    def decode_cursor(self, request):
        try:
            return super().decode_cursor(request)
        except NotFound_:
            raise Invalid("invalid_cursor", "The pagination cursor is not one this list gave out.", status_code=400)


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
    """``data`` (a JSON object) validated by an input serializer, or 422 ``validation_error`` with its errors;
    ``strict``: a field the serializer does not know is 422 ``unknown_field`` (other bodies ignore them)."""
    serializer = serializer_class(data=json_object(data))
    unknown = sorted(set(data) - set(serializer.fields)) if strict else []
    if unknown:
        raise Invalid("unknown_field", f"Unknown field {unknown[0]!r}; this body takes "
                                       f"{', '.join(serializer.fields)}.",
                      errors={name: ["Unknown field."] for name in unknown})
    if not serializer.is_valid():
        raise Invalid("validation_error", "Invalid input.", errors=serializer.errors)
    return serializer.validated_data


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
    return [agents for agents in Workflow.objects.filter(slug__in=slugs).values_list("agents", flat=True)]


def run_key_of(request, kwargs) -> tuple[str, list[str]] | None:
    """The path's run's intent and its workflow's allow-list, read once per request (a run's key never
    changes; None: no such run)."""
    if not hasattr(request, "run_key"):
        keys = RunKey.objects.filter(run_id=kwargs["run_id"])
        request.run_key = keys.values_list("intent", "workflow__agents").first()
    return request.run_key


def run_intent_of(request, kwargs) -> str | None:
    found = run_key_of(request, kwargs)
    return found[0] if found else None


def agents_of_run(request, kwargs) -> list[list[str]]:
    """The allow-list of the path's run's workflow (a run that does not exist: none; the service says 404)."""
    found = run_key_of(request, kwargs)
    return [found[1]] if found and found[1] else []


def agents_of_slug(request, kwargs) -> list[list[str]]:
    return _agents_of([kwargs["slug"]])


def agents_of_body_workflow(request, kwargs) -> list[list[str]]:
    """The allow-list of the workflow a trigger names (a body that names none: none; validation says why)."""
    slug = request_field(request, "workflow")
    return _agents_of([slug]) if slug else []


def agents_of_lease(request, kwargs) -> list[list[str]]:
    """A lease naming workflows is refused if any refuses the caller; naming none skips them instead."""
    data = request_data(request)
    slugs = data.get("workflows") if isinstance(data, dict) else None
    if not isinstance(slugs, list) or not all(isinstance(s, str) for s in slugs):
        return []
    return _agents_of(slugs)


def refusal_record(user, *, action: str, code: str, request, kwargs: dict, errors=None) -> None:
    """The audit entry of one refused attempt (``stateboard.policy.refusal_recorder``), written outside
    the refused write's rolled-back transaction; what was refused is named by the path (and ``errors``,
    the refusal's own, e.g. each refused definition of an apply)."""
    run_id, target = kwargs.get("run_id"), ""
    if "approval_id" in kwargs:
        target = str(kwargs["approval_id"])
        run_id = Approval.objects.filter(id=kwargs["approval_id"]).values_list("run_id", flat=True).first()
    elif run_id is not None:
        target = str(run_id)
    else:
        target = kwargs.get("key") or kwargs.get("slug") or request_field(request, "key") \
            or request_field(request, "workflow")
    if run_id is not None and not RunKey.objects.filter(run_id=run_id).exists():
        run_id = None
    with transaction.atomic():
        audit_record(user=user, action=action, outcome="refused", run_id=run_id, target=str(target)[:200],
                     code=code, reason=request_field(request, "reason")[:1000],
                     data={"errors": errors} if errors else None)


class ReasonInputSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")
