"""The agent-facing REST API of the ledger (see shared/API.md). Views are thin: validate → service → serialize."""

import functools
import threading
import time
from datetime import timezone as dt_timezone

from django.db import transaction
from django.utils import timezone
from django_filters import rest_framework as filters
from drf_spectacular.utils import OpenApiResponse, extend_schema_view
from rest_framework import serializers, status
from rest_framework.generics import ListAPIView
from rest_framework.pagination import CursorPagination
from rest_framework.response import Response
from rest_framework.views import APIView

from ledger import authorizers, selectors, services, sql
from ledger.auth import token_confirmed
from ledger.filters import RunFilter, StrictFilterBackend
from ledger.models import Approval, Effect, LedgerEvent, Run, Trigger, Workflow
from ledger.schema_components import (EVENT_INPUT_OR_BATCH, METRICS, ChainReportSerializer, CheckpointPayloadSerializer,
                                      CheckpointSerializer, one_or_many, operation, page_of)
from ledger.schema_operations import OPS
from stateboard.errors import Invalid, NotFound, Refused
from stateboard.refusals import refusals
from stateboard.roles import AGENT, ANY, OWNER, actor_for, has_role

# Views of an action that an authorizer decides let every signed-in identity reach the method
# (``roles = {"POST": ANY}``) and name the authorizer, which refuses with 403 and is audited.


# ---------------------------------------------------------------- output shapes

class WorkflowOutputSerializer(serializers.ModelSerializer):
    """``executors`` (handler URLs, the names of secret variables) is shown to owners only."""

    owner = serializers.SlugRelatedField(slug_field="username", read_only=True)
    schedule_intent = serializers.SerializerMethodField()

    class Meta:
        model = Workflow
        fields = ["slug", "title", "stages", "effect_stages", "approval_stages", "policy_version",
                  "max_retries", "lease_seconds", "checkpoint_ttl_seconds", "approval_ttl_seconds",
                  "schedule", "schedule_intent", "schedule_inputs", "executors", "knowledge_scope",
                  "owner", "created_at", "updated_at"]

    def get_schedule_intent(self, workflow) -> str:
        return workflow.schedule_intent or workflow.slug

    def to_representation(self, workflow):
        body = super().to_representation(workflow)
        request = self.context.get("request")
        if request is None or not has_role(request.user, OWNER):
            body.pop("executors", None)
        return body


class EffectOutputSerializer(serializers.ModelSerializer):
    workflow = serializers.SlugRelatedField(slug_field="slug", read_only=True)

    class Meta:
        model = Effect
        fields = ["idempotency_key", "workflow", "intent", "input_fingerprint", "stage", "run", "status",
                  "system", "operation", "reference", "attempts", "claimed_seq", "last_seq",
                  "created_at", "updated_at"]


class ApprovalOutputSerializer(serializers.ModelSerializer):
    workflow = serializers.CharField(source="run.workflow.slug", read_only=True)

    class Meta:
        model = Approval
        fields = ["id", "kind", "run", "workflow", "stage", "action", "action_digest", "policy_version",
                  "input_fingerprint", "status", "requested_by", "decided_by", "decided_role", "reason",
                  "created_at", "deadline", "decided_at", "consumed_at", "consumed_seq"]


class RunOutputSerializer(serializers.ModelSerializer):
    workflow = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    lease = serializers.SerializerMethodField()

    class Meta:
        model = Run
        fields = ["id", "workflow", "intent", "trigger", "trigger_key", "inputs", "input_fingerprint",
                  "policy_version", "env_fingerprint", "state", "decision", "current_stage", "stage_states",
                  "triggered_by", "created_at", "updated_at", "decided_at", "ended_at", "lease", "event_count",
                  "staged", "goal_version"]

    def get_lease(self, run) -> dict | None:
        return _lease_body(run)

    def to_representation(self, run):
        return run_body(run)


class RunDetailOutputSerializer(RunOutputSerializer):
    effects = EffectOutputSerializer(many=True, read_only=True)
    approvals = ApprovalOutputSerializer(many=True, read_only=True)

    class Meta(RunOutputSerializer.Meta):
        fields = RunOutputSerializer.Meta.fields + ["effects", "approvals"]

    def to_representation(self, run):
        body = run_body(run)
        for name in ("effects", "approvals"):
            field = self.fields[name]
            body[name] = field.to_representation(field.get_attribute(run))
        return body


class EventOutputSerializer(serializers.ModelSerializer):
    class Meta:
        model = LedgerEvent
        fields = ["id", "run", "seq", "at", "stage", "kind", "actor", "input_fingerprint", "policy_version",
                  "env_fingerprint", "idempotency_key", "effect", "evidence", "reason_code", "data",
                  "client_event_id", "prev_hash", "hash"]

    def to_representation(self, event):
        return event_body(event)


def _drf_datetime(value):
    """A datetime as DRF renders it (ISO 8601, UTC as Z)."""
    if value is None:
        return None
    text = value.astimezone(dt_timezone.utc).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


# The output shapes of the hot paths are built directly, not field by field through DRF (a trigger's
# answer took 1 ms in the serializer); the serializers above declare them for the schema and call these.
# tests/ledger/test_output_shapes.py checks both against DRF's own ModelSerializer output.

_EVENT_FIELDS = tuple((name, name in ("run", "at")) for name in EventOutputSerializer.Meta.fields)


def event_body(event: LedgerEvent) -> dict:
    return {name: (event.run_id if name == "run" else _drf_datetime(event.at)) if special else getattr(event, name)
            for name, special in _EVENT_FIELDS}


def _lease_body(run: Run) -> dict | None:
    if not run.lease_owner or run.is_terminal:
        return None
    return {"owner": run.lease_owner, "id": str(run.lease_id) if run.lease_id else None,
            "expires_at": _drf_datetime(run.lease_expires_at)}


def run_body(run: Run, **extra) -> dict:
    queued = run.queued_until is not None and not run.is_terminal
    body = {
        "id": str(run.id), "workflow": run.workflow.slug, "intent": run.intent, "trigger": run.trigger,
        "trigger_key": run.trigger_key, "inputs": run.inputs, "input_fingerprint": run.input_fingerprint,
        "policy_version": run.policy_version, "env_fingerprint": run.env_fingerprint, "state": run.state,
        "decision": run.decision, "current_stage": run.current_stage, "stage_states": run.stage_states,
        "triggered_by": run.triggered_by, "created_at": _drf_datetime(run.created_at),
        "updated_at": _drf_datetime(run.updated_at), "decided_at": _drf_datetime(run.decided_at),
        "ended_at": _drf_datetime(run.ended_at), "lease": _lease_body(run), "event_count": run.event_count,
        "staged": run.staged, "goal_version": run.goal_version, "queued": queued,
    }
    if queued:
        body["queued_until"] = _drf_datetime(run.queued_until)
    body.update(extra)
    return body


# ---------------------------------------------------------------- pagination and helpers

class NewestFirstCursor(CursorPagination):
    ordering = ("-created_at", "-id")
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500


class SeqCursor(CursorPagination):
    ordering = ("seq",)
    page_size = 200
    page_size_query_param = "page_size"
    max_page_size = 1000


def _body(request) -> dict:
    return _json_object(request.data)


def _json_object(data) -> dict:
    if not isinstance(data, dict):
        raise Invalid("validation_error", "The body must be a JSON object.")
    return data


def _validated(serializer_class, request):
    return _validated_data(serializer_class, _body(request))


_input_serializers = threading.local()


def _validated_data(serializer_class, data: dict):
    """``data`` validated by an input serializer, or 422 ``validation_error`` with its errors (what
    ``is_valid`` gives). One serializer per class and thread, reused: a new one deep-copies every declared
    field (a fifth of a duplicate trigger's CPU), and ``run_validation`` keeps nothing from one call to the
    next (DRF's ListSerializer runs one child over every item the same way)."""
    serializer = _input_serializers.__dict__.get(serializer_class)
    if serializer is None:
        serializer = _input_serializers.__dict__[serializer_class] = serializer_class()
    try:
        return serializer.run_validation(data)
    except serializers.ValidationError as exc:
        raise Invalid("validation_error", "Invalid input.", errors=exc.detail)


def _get_run(run_id) -> Run:
    """The run of a ``<uuid:run_id>`` path (a malformed id never reaches the view: 404 ``not_found``)."""
    try:
        return selectors.run_list().get(id=run_id)
    except Run.DoesNotExist:
        raise NotFound("run_not_found", f"No run with id {run_id}.")


# ---------------------------------------------------------------- workflows

class WorkflowInputSerializer(serializers.Serializer):
    """Field types only; the rules of a definition live in ``services.workflow_validate``."""

    slug = serializers.SlugField(max_length=100)
    title = serializers.CharField(max_length=200, required=False, allow_blank=True)
    stages = serializers.ListField(child=serializers.SlugField(max_length=100), min_length=1, required=False)
    effect_stages = serializers.ListField(child=serializers.CharField(max_length=100), required=False)
    approval_stages = serializers.ListField(child=serializers.CharField(max_length=100), required=False)
    policy_version = serializers.CharField(max_length=100, required=False)
    max_retries = serializers.IntegerField(required=False)
    lease_seconds = serializers.IntegerField(required=False)
    checkpoint_ttl_seconds = serializers.IntegerField(required=False)
    approval_ttl_seconds = serializers.IntegerField(required=False)
    schedule = serializers.CharField(max_length=100, required=False, allow_blank=True)
    schedule_intent = serializers.CharField(max_length=500, required=False, allow_blank=True)
    schedule_inputs = serializers.JSONField(required=False)
    executors = serializers.JSONField(required=False)
    knowledge_scope = serializers.JSONField(required=False)


class WorkflowListCreateApi(APIView):
    roles = {"GET": ANY, "POST": ANY}
    authorizer = authorizers.may_edit_workflow

    @operation(OPS["workflows_list"], responses={200: page_of("WorkflowList", WorkflowOutputSerializer)})
    def get(self, request):
        workflows = Workflow.objects.select_related("owner")
        return Response({"results": WorkflowOutputSerializer(workflows, many=True, context={"request": request}).data,
                         "next": None})

    @operation(OPS["workflows_create"], request=WorkflowInputSerializer, responses={201: WorkflowOutputSerializer})
    @refusals("workflow_create", audit=(Refused,))
    def post(self, request):
        authorizers.may_edit_workflow(request.user)
        data = _validated(WorkflowInputSerializer, request)
        workflow = services.workflow_create(user=request.user, data=data)
        return Response(WorkflowOutputSerializer(workflow, context={"request": request}).data,
                        status=status.HTTP_201_CREATED)


class WorkflowPatchInputSerializer(WorkflowInputSerializer):
    slug = None
    reason = serializers.CharField(max_length=2000, required=False, allow_blank=True)


class WorkflowDetailApi(APIView):
    roles = {"GET": ANY, "PATCH": ANY}
    authorizer = authorizers.may_edit_workflow

    @operation(OPS["workflows_retrieve"], responses={200: WorkflowOutputSerializer})
    def get(self, request, slug):
        workflow = Workflow.objects.select_related("owner").filter(slug=slug).first()
        if workflow is None:
            raise NotFound("workflow_not_found", f"No workflow {slug!r}.")
        return Response(WorkflowOutputSerializer(workflow, context={"request": request}).data)

    @operation(OPS["workflows_partial_update"], request=WorkflowPatchInputSerializer,
               responses={200: WorkflowOutputSerializer})
    @refusals("workflow_update", audit=(Refused,))
    def patch(self, request, slug):
        authorizers.may_edit_workflow(request.user)
        if not Workflow.objects.filter(slug=slug).exists():
            raise NotFound("workflow_not_found", f"No workflow {slug!r}.")
        data = dict(_validated(WorkflowPatchInputSerializer, request))
        reason = data.pop("reason", "")
        workflow = services.workflow_update(user=request.user, slug=slug, data=data, reason=reason)
        return Response(WorkflowOutputSerializer(workflow, context={"request": request}).data)


# ---------------------------------------------------------------- runs

class RunTriggerInputSerializer(serializers.Serializer):
    workflow = serializers.CharField(max_length=100)
    intent = serializers.CharField(max_length=500, required=False, allow_blank=True)
    trigger = serializers.ChoiceField(choices=Trigger.values, required=False)
    trigger_key = serializers.CharField(max_length=500, required=False, allow_blank=True)
    inputs = serializers.JSONField(help_text="a JSON object")
    env_fingerprint = serializers.CharField(max_length=500, required=False, allow_blank=True)
    staged = serializers.BooleanField(required=False, default=False)

    def validate_inputs(self, value):
        if not isinstance(value, dict):
            raise serializers.ValidationError("inputs must be a JSON object.")
        return value


@extend_schema_view(get=operation(OPS["runs_list"], responses={200: RunOutputSerializer}))
class RunListCreateApi(ListAPIView):
    roles = {"GET": ANY, "POST": ANY}
    token_cached = {"POST"}  # the trigger's first read confirms a cached token (ledger.auth)
    authorizer = authorizers.may_trigger
    serializer_class = RunOutputSerializer
    pagination_class = NewestFirstCursor
    filter_backends = [StrictFilterBackend]
    filterset_class = RunFilter

    def get_queryset(self):
        return selectors.run_list()

    @operation(OPS["runs_create"], request=RunTriggerInputSerializer,
               responses={201: RunOutputSerializer, 200: RunOutputSerializer})
    @refusals("trigger", audit=(Refused,))
    def post(self, request):
        arrived = time.monotonic()  # SPEC §7: the trigger's latency runs from here to the committed decision
        body, status_code = token_confirmed(self, request,
                                            lambda: trigger_answer(request.user, lambda: request.data, arrived))
        return Response(body, status=status_code)


def trigger_answer(user, data, arrived: float) -> tuple[dict, int]:
    """What ``POST /runs/`` answers: (body, status). ``data()`` gives the decoded body, read once the
    caller may trigger at all; ``arrived`` is when the request came in (``time.monotonic``). Both the view
    above and ``ledger.fastpath`` answer with it."""
    authorizers.may_trigger(user)
    data = _validated_data(RunTriggerInputSerializer, _json_object(data()))
    trigger = data.get("trigger") or ("api" if has_role(user, AGENT) else "human")
    run, created = services.run_trigger(
        workflow_slug=data["workflow"], intent=data.get("intent") or None, trigger=trigger,
        trigger_key=data.get("trigger_key") or None, inputs=data["inputs"],
        env_fingerprint=data.get("env_fingerprint", ""), actor=actor_for(user), staged=data.get("staged", False))
    if created:  # a duplicate decided nothing
        transaction.on_commit(functools.partial(_decision_latency_record, run.id, arrived), robust=True)
    return run_body(run, duplicate=not created), status.HTTP_201_CREATED if created else status.HTTP_200_OK


class RunLeaseInputSerializer(serializers.Serializer):
    workflows = serializers.ListField(child=serializers.CharField(max_length=100), required=False, allow_empty=True)
    wait_seconds = serializers.FloatField(min_value=0, max_value=30, required=False, default=0)


class RunLeaseApi(APIView):
    """SPEC §9.1: the earliest-queued run, now leased to the calling agent (200), or 204."""

    roles = {"POST": {AGENT}}

    @operation(OPS["runs_lease_create"], request=RunLeaseInputSerializer,
               responses={200: RunDetailOutputSerializer, 204: OpenApiResponse(description="no queued run")})
    def post(self, request):
        data = _validated(RunLeaseInputSerializer, request)
        run = services.run_lease(actor=actor_for(request.user), workflows=data.get("workflows") or None,
                                 wait_seconds=data["wait_seconds"])
        if run is None:
            return Response(status=status.HTTP_204_NO_CONTENT)
        return Response(RunDetailOutputSerializer(selectors.run_detail(run_id=run.id)).data)


def _decision_latency_record(run_id, arrived: float) -> None:
    """Runs once the trigger's transaction (and so its `decided` event) has committed."""
    milliseconds = (time.monotonic() - arrived) * 1000
    if sql.available():
        sql.decision_latency_write(run_id, milliseconds)
    else:
        Run.objects.filter(id=run_id).update(decision_latency_ms=milliseconds)


class RunDetailApi(APIView):
    roles = {"GET": ANY}

    @operation(OPS["runs_retrieve"], responses={200: RunDetailOutputSerializer})
    def get(self, request, run_id):
        try:
            run = selectors.run_detail(run_id=run_id)
        except Run.DoesNotExist:
            raise NotFound("run_not_found", f"No run with id {run_id}.")
        return Response(RunDetailOutputSerializer(run).data)


@extend_schema_view(get=operation(OPS["runs_events_list"], responses={200: EventOutputSerializer}))
class RunEventsApi(ListAPIView):
    roles = {"GET": ANY, "POST": ANY}
    token_cached = {"POST"}  # the append's locking read confirms a cached token (ledger.auth)
    authorizer = authorizers.may_append_event
    serializer_class = EventOutputSerializer
    pagination_class = SeqCursor

    def get_queryset(self):
        return selectors.run_events(run=_get_run(self.kwargs["run_id"]))

    @operation(OPS["runs_events_create"], request=EVENT_INPUT_OR_BATCH,
               responses={201: one_or_many("EventOrBatch", EventOutputSerializer),
                          200: one_or_many("EventOrBatch", EventOutputSerializer)})
    @refusals("event_append", audit=(Refused,))
    def post(self, request, run_id):
        return token_confirmed(self, request, functools.partial(self._append, request, run_id))

    def _append(self, request, run_id):
        body, status_code = append_answer(request.user, run_id, request.data)
        return Response(body, status=status_code)


def append_answer(user, run_id, data) -> tuple[dict | list, int]:
    """What ``POST /runs/{id}/events/`` answers for a decoded body, one event or a batch (all or nothing,
    API.md): (body, status). Both the view above and ``ledger.fastpath`` answer with it."""
    authorizers.may_append_event(user, run_id)
    actor = actor_for(user)
    if isinstance(data, list):
        events, created = services.events_append(run_id=run_id, bodies=data, actor=actor)
        body = [event_body(event) for event in events]
    else:
        event, created = services.event_append(run_id=run_id, body=_json_object(data), actor=actor)
        body = event_body(event)
    return body, status.HTTP_201_CREATED if created else status.HTTP_200_OK


class RunVerifyChainApi(APIView):
    roles = {"GET": ANY}

    @operation(OPS["runs_verify_chain_retrieve"], responses={200: ChainReportSerializer})
    def get(self, request, run_id):
        return Response(services.chain_verify(run=_get_run(run_id)))


def _checkpoint_body(checkpoint, now=None) -> dict:
    now = now or timezone.now()
    return {"id": checkpoint.id, "run": str(checkpoint.run_id), "workflow": checkpoint.workflow.slug,
            "intent": checkpoint.intent, "source": checkpoint.source, "created_at": checkpoint.created_at,
            "expires_at": checkpoint.expires_at, "expired": checkpoint.expires_at <= now,
            "input_fingerprint": checkpoint.input_fingerprint, "policy_version": checkpoint.policy_version,
            "env_fingerprint": checkpoint.env_fingerprint, "version_boundary": checkpoint.version_boundary,
            "payload": {**checkpoint.payload, "created_at": checkpoint.created_at,
                        "expires_at": checkpoint.expires_at}}


class RunCheckpointCreateApi(APIView):
    roles = {"POST": ANY}
    authorizer = authorizers.may_save_checkpoint

    @operation(OPS["runs_checkpoints_create"], request=CheckpointPayloadSerializer,
               responses={201: CheckpointSerializer})
    @refusals("checkpoint_save", audit=(Refused,))
    def post(self, request, run_id):
        authorizers.may_save_checkpoint(request.user, run_id)
        checkpoint = services.checkpoint_save(run_id=run_id, payload=_body(request), actor=actor_for(request.user))
        return Response(_checkpoint_body(checkpoint), status=status.HTTP_201_CREATED)


class RunCheckpointLatestApi(APIView):
    roles = {"GET": ANY}

    @operation(OPS["runs_checkpoint_retrieve"], responses={200: CheckpointSerializer})
    def get(self, request, run_id):
        checkpoint = selectors.checkpoint_latest(run=_get_run(run_id))
        if checkpoint is None:
            raise NotFound("no_checkpoint", "No checkpoint has been saved for this run's intent.")
        return Response(_checkpoint_body(checkpoint))


# ---------------------------------------------------------------- effects and metrics

class EffectFilter(filters.FilterSet):
    run = filters.UUIDFilter(field_name="run_id")
    status = filters.ChoiceFilter(choices=Effect._meta.get_field("status").choices)
    idempotency_key = filters.CharFilter()
    workflow = filters.CharFilter(field_name="workflow__slug")

    class Meta:
        model = Effect
        fields = ["run", "status", "idempotency_key", "workflow"]


@extend_schema_view(get=operation(OPS["effects_list"], responses={200: EffectOutputSerializer}))
class EffectListApi(ListAPIView):
    roles = {"GET": ANY}
    serializer_class = EffectOutputSerializer
    pagination_class = NewestFirstCursor
    filter_backends = [StrictFilterBackend]
    filterset_class = EffectFilter

    def get_queryset(self):
        return selectors.effect_list()


class MetricsApi(APIView):
    roles = {"GET": ANY}

    @operation(OPS["metrics_retrieve"], responses={200: METRICS})
    def get(self, request):
        since = request.query_params.get("since")
        since_at = services.parse_moment(since) if since else None
        if since and since_at is None:
            raise Invalid("validation_error", "since must be an ISO 8601 date-time.")
        return Response(selectors.metrics(workflow_slug=request.query_params.get("workflow") or None,
                                          since=since_at))
