"""The agent-facing REST API of the ledger (see shared/API.md). Views are thin: validate → service → serialize."""

import uuid

from datetime import timezone as dt_timezone

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import transaction
from django_filters import rest_framework as filters
from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.exceptions import ParseError
from rest_framework.generics import ListAPIView
from rest_framework.pagination import CursorPagination
from rest_framework.response import Response
from rest_framework.views import APIView

from ledger import selectors, services
from ledger.models import Approval, Effect, LedgerEvent, Run, Trigger, Workflow
from ledger.schedules import periodic_tasks_ensure
from stateboard.errors import DomainError, Invalid, NotFound
from stateboard.roles import AGENT, ANY, EDITOR, ONCALL, OWNER, actor_for, has_role

HUMANS_AND_AGENTS = frozenset({AGENT, EDITOR, OWNER, ONCALL})


# ---------------------------------------------------------------- output shapes

class WorkflowOutputSerializer(serializers.ModelSerializer):
    owner = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        model = Workflow
        fields = ["slug", "title", "stages", "effect_stages", "approval_stages", "policy_version",
                  "max_retries", "lease_seconds", "checkpoint_ttl_seconds", "approval_ttl_seconds",
                  "schedule", "owner", "created_at", "updated_at"]


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

    def get_lease(self, run) -> dict:
        return {"owner": run.lease_owner, "expires_at": run.lease_expires_at}


class RunDetailOutputSerializer(RunOutputSerializer):
    effects = EffectOutputSerializer(many=True, read_only=True)
    approvals = ApprovalOutputSerializer(many=True, read_only=True)

    class Meta(RunOutputSerializer.Meta):
        fields = RunOutputSerializer.Meta.fields + ["effects", "approvals"]


class EventOutputSerializer(serializers.ModelSerializer):
    class Meta:
        model = LedgerEvent
        fields = ["id", "run", "seq", "at", "stage", "kind", "actor", "input_fingerprint", "policy_version",
                  "env_fingerprint", "idempotency_key", "effect", "evidence", "reason_code", "data",
                  "client_event_id", "prev_hash", "hash"]


def _drf_datetime(value):
    """A datetime as DRF renders it (ISO 8601, UTC as Z)."""
    if value is None:
        return None
    text = value.astimezone(dt_timezone.utc).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def event_body(event: LedgerEvent) -> dict:
    """EventOutputSerializer's output, built directly (the POST /events/ hot path)."""
    body = {name: getattr(event, name) for name in EventOutputSerializer.Meta.fields if name not in ("run", "at")}
    body.update(run=event.run_id, at=_drf_datetime(event.at))
    return body


def _run_body(run: Run, **extra) -> dict:
    return {**RunOutputSerializer(run).data, **extra}


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
    if not isinstance(request.data, dict):
        raise Invalid("validation_error", "The body must be a JSON object.")
    return request.data


def _validated(serializer_class, request):
    serializer = serializer_class(data=_body(request))
    if not serializer.is_valid():
        raise Invalid("validation_error", "Invalid input.", errors=serializer.errors)
    return serializer.validated_data


def _get_run(run_id) -> Run:
    try:
        return selectors.run_list().get(id=run_id)
    except (Run.DoesNotExist, ValueError, TypeError, DjangoValidationError):
        raise NotFound("run_not_found", f"No run with id {run_id}.")


class AuditedAction:
    """Human actions: a refused attempt (role or rule) is recorded before the error is answered."""

    audit_action = ""

    @staticmethod
    def audit_uuid(value):
        """A path id as a UUID, or None when malformed (the refusal is still recorded, never a 500)."""
        try:
            return uuid.UUID(str(value)) if value else None
        except (ValueError, TypeError, AttributeError):
            return None

    def audit_run_id(self, kwargs):
        return self.audit_uuid(kwargs.get("run_id"))

    def permission_denied(self, request, message=None, code=None):
        if request.user and request.user.is_authenticated:
            self._audit_refusal(request, "permission_denied")
        super().permission_denied(request, message=message, code=code)

    def _audit_refusal(self, request, code: str):
        run_id = self.audit_run_id(self.kwargs)
        try:
            reason = request.data.get("reason", "") if isinstance(request.data, dict) else ""
        except ParseError:  # a refused request with a malformed body is still a refusal
            reason = ""
        try:
            with transaction.atomic():
                services.audit_record(user=request.user, action=self.audit_action, outcome="refused",
                                      run_id=run_id if run_id and Run.objects.filter(id=run_id).exists() else None,
                                      target=str(self.kwargs.get("approval_id", self.kwargs.get("run_id", "")))[:200],
                                      code=code,
                                      reason=str(reason)[:1000])
        except (ValueError, TypeError):
            pass

    def perform(self, request, fn):
        try:
            return fn()
        except DomainError as exc:
            self._audit_refusal(request, exc.code)
            raise


# ---------------------------------------------------------------- workflows

class WorkflowInputSerializer(serializers.Serializer):
    slug = serializers.SlugField(max_length=100)
    title = serializers.CharField(max_length=200, required=False, allow_blank=True)
    stages = serializers.ListField(child=serializers.SlugField(max_length=100), min_length=1, required=False)
    effect_stages = serializers.ListField(child=serializers.CharField(max_length=100), required=False)
    approval_stages = serializers.ListField(child=serializers.CharField(max_length=100), required=False)
    policy_version = serializers.CharField(max_length=100, required=False)
    max_retries = serializers.IntegerField(min_value=1, max_value=100, required=False)
    lease_seconds = serializers.IntegerField(min_value=5, max_value=7 * 86400, required=False)
    checkpoint_ttl_seconds = serializers.IntegerField(min_value=60, max_value=365 * 86400, required=False)
    approval_ttl_seconds = serializers.IntegerField(min_value=60, max_value=365 * 86400, required=False)
    schedule = serializers.CharField(max_length=100, required=False, allow_blank=True)

    def validate(self, attrs):
        stages = attrs.get("stages") or (self.instance.stages if self.instance else None) or Workflow().stages
        if len(set(stages)) != len(stages):
            raise serializers.ValidationError({"stages": "Stage names must be unique."})
        for name in ("effect_stages", "approval_stages"):
            listed = attrs.get(name, getattr(self.instance, name, None) if self.instance else None)
            if listed is None:
                listed = [s for s in getattr(Workflow(), name) if s in stages] if "stages" in attrs else None
                if listed is not None:
                    attrs[name] = listed
            if listed is not None and set(listed) - set(stages):
                raise serializers.ValidationError({name: f"Unknown stages: {sorted(set(listed) - set(stages))}."})
        schedule = attrs.get("schedule")
        if schedule and len(schedule.split()) != 5:
            raise serializers.ValidationError({"schedule": "Use a five-field cron expression."})
        return attrs


class WorkflowListCreateApi(APIView):
    roles = {"GET": ANY, "POST": {OWNER}}

    @extend_schema(responses=WorkflowOutputSerializer(many=True))
    def get(self, request):
        return Response({"results": WorkflowOutputSerializer(Workflow.objects.select_related("owner"), many=True).data,
                         "next": None})

    @extend_schema(request=WorkflowInputSerializer, responses={201: WorkflowOutputSerializer})
    def post(self, request):
        data = _validated(WorkflowInputSerializer, request)
        if Workflow.objects.filter(slug=data["slug"]).exists():
            raise DomainError("workflow_exists", f"A workflow {data['slug']!r} already exists.")
        workflow = Workflow.objects.create(owner=request.user, **data)
        if workflow.schedule:
            periodic_tasks_ensure()
        return Response(WorkflowOutputSerializer(workflow).data, status=status.HTTP_201_CREATED)


class WorkflowPatchInputSerializer(WorkflowInputSerializer):
    slug = None


class WorkflowDetailApi(APIView):
    roles = {"GET": ANY, "PATCH": {OWNER}}

    def _get(self, slug) -> Workflow:
        workflow = Workflow.objects.select_related("owner").filter(slug=slug).first()
        if workflow is None:
            raise NotFound("workflow_not_found", f"No workflow {slug!r}.")
        return workflow

    @extend_schema(responses=WorkflowOutputSerializer)
    def get(self, request, slug):
        return Response(WorkflowOutputSerializer(self._get(slug)).data)

    @extend_schema(request=WorkflowPatchInputSerializer, responses=WorkflowOutputSerializer)
    def patch(self, request, slug):
        with transaction.atomic():
            workflow = Workflow.objects.select_for_update().filter(slug=slug).first()
            if workflow is None:
                raise NotFound("workflow_not_found", f"No workflow {slug!r}.")
            serializer = WorkflowPatchInputSerializer(workflow, data=_body(request), partial=True)
            if not serializer.is_valid():
                raise Invalid("validation_error", "Invalid input.", errors=serializer.errors)
            old_policy, old_schedule = workflow.policy_version, workflow.schedule
            for name, value in serializer.validated_data.items():
                setattr(workflow, name, value)
            workflow.save()
            if workflow.schedule != old_schedule:
                periodic_tasks_ensure()
            if workflow.policy_version != old_policy:
                services.audit_record(user=request.user, action="policy_bump", outcome="done",
                                      target=workflow.slug, reason=str(_body(request).get("reason", "")),
                                      data={"from": old_policy, "to": workflow.policy_version})
        return Response(WorkflowOutputSerializer(workflow).data)


# ---------------------------------------------------------------- runs

class RunFilter(filters.FilterSet):
    workflow = filters.CharFilter(field_name="workflow__slug")
    state = filters.CharFilter()
    intent = filters.CharFilter()
    created_after = filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="gte")
    created_before = filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="lt")

    class Meta:
        model = Run
        fields = ["workflow", "state", "intent"]


class RunTriggerInputSerializer(serializers.Serializer):
    workflow = serializers.CharField(max_length=100)
    intent = serializers.CharField(max_length=500, required=False, allow_blank=True)
    trigger = serializers.ChoiceField(choices=Trigger.values, required=False)
    trigger_key = serializers.CharField(max_length=500, required=False, allow_blank=True)
    inputs = serializers.JSONField()
    env_fingerprint = serializers.CharField(max_length=500, required=False, allow_blank=True)
    staged = serializers.BooleanField(required=False, default=False)


class RunListCreateApi(ListAPIView):
    roles = {"GET": ANY, "POST": HUMANS_AND_AGENTS}
    serializer_class = RunOutputSerializer
    pagination_class = NewestFirstCursor
    filter_backends = [filters.DjangoFilterBackend]
    filterset_class = RunFilter

    def get_queryset(self):
        return selectors.run_list(user=self.request.user)

    @extend_schema(request=RunTriggerInputSerializer, responses={201: RunOutputSerializer, 200: RunOutputSerializer})
    def post(self, request):
        data = _validated(RunTriggerInputSerializer, request)
        trigger = data.get("trigger") or ("api" if has_role(request.user, AGENT) else "human")
        run, created = services.run_trigger(
            workflow_slug=data["workflow"], intent=data.get("intent") or None, trigger=trigger,
            trigger_key=data.get("trigger_key") or None, inputs=data["inputs"],
            env_fingerprint=data.get("env_fingerprint", ""), actor=actor_for(request.user),
            staged=data.get("staged", False))
        return Response(_run_body(run, duplicate=not created),
                        status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)


class RunDetailApi(APIView):
    roles = {"GET": ANY}

    @extend_schema(responses=RunDetailOutputSerializer)
    def get(self, request, run_id):
        try:
            run = selectors.run_detail(run_id=run_id, user=request.user)
        except (Run.DoesNotExist, ValueError, TypeError, DjangoValidationError):
            raise NotFound("run_not_found", f"No run with id {run_id}.")
        return Response(RunDetailOutputSerializer(run).data)


class RunEventsApi(ListAPIView):
    roles = {"GET": ANY, "POST": {AGENT}}
    serializer_class = EventOutputSerializer
    pagination_class = SeqCursor

    def get_queryset(self):
        return selectors.run_events(run=_get_run(self.kwargs["run_id"]))

    @extend_schema(request=inline_serializer("EventInput", {
        "client_event_id": serializers.CharField(required=False), "stage": serializers.CharField(),
        "kind": serializers.CharField(), "effect": serializers.JSONField(required=False),
        "evidence": serializers.JSONField(required=False), "reason_code": serializers.CharField(required=False),
        "data": serializers.JSONField(required=False), "idempotency_key": serializers.CharField(required=False),
        "action": serializers.JSONField(required=False)}),
        responses={201: EventOutputSerializer, 200: EventOutputSerializer})
    def post(self, request, run_id):
        event, created = services.event_append(run_id=run_id, body=_body(request), actor=actor_for(request.user))
        return Response(event_body(event),
                        status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)


class RunVerifyChainApi(APIView):
    roles = {"GET": ANY}

    @extend_schema(responses=inline_serializer("ChainReport", {
        "ok": serializers.BooleanField(), "events": serializers.IntegerField(),
        "first_bad_seq": serializers.IntegerField(allow_null=True)}))
    def get(self, request, run_id):
        return Response(services.chain_verify(run=_get_run(run_id)))


def _checkpoint_body(checkpoint, now=None) -> dict:
    from django.utils import timezone

    now = now or timezone.now()
    return {"id": checkpoint.id, "run": str(checkpoint.run_id), "workflow": checkpoint.workflow.slug,
            "intent": checkpoint.intent, "source": checkpoint.source, "created_at": checkpoint.created_at,
            "expires_at": checkpoint.expires_at, "expired": checkpoint.expires_at <= now,
            "input_fingerprint": checkpoint.input_fingerprint, "policy_version": checkpoint.policy_version,
            "env_fingerprint": checkpoint.env_fingerprint, "version_boundary": checkpoint.version_boundary,
            "payload": {**checkpoint.payload, "created_at": checkpoint.created_at,
                        "expires_at": checkpoint.expires_at}}


class RunCheckpointCreateApi(APIView):
    roles = {"POST": {AGENT}}

    @extend_schema(request=inline_serializer("CheckpointInput", {"state_table": serializers.JSONField()}),
                   responses={201: OpenApiResponse(description="the saved checkpoint")})
    def post(self, request, run_id):
        checkpoint = services.checkpoint_save(run_id=run_id, payload=_body(request), actor=actor_for(request.user))
        return Response(_checkpoint_body(checkpoint), status=status.HTTP_201_CREATED)


class RunCheckpointLatestApi(APIView):
    roles = {"GET": ANY}

    @extend_schema(responses={200: OpenApiResponse(description="the latest checkpoint of the run's intent")})
    def get(self, request, run_id):
        checkpoint = selectors.checkpoint_latest(run=_get_run(run_id))
        if checkpoint is None:
            raise NotFound("no_checkpoint", "No checkpoint has been saved for this run's intent.")
        return Response(_checkpoint_body(checkpoint))


# ---------------------------------------------------------------- approvals and on-call

class ApprovalRequestInputSerializer(serializers.Serializer):
    kind = serializers.CharField()
    stage = serializers.CharField(max_length=100)
    action = serializers.JSONField()


class RunApprovalCreateApi(APIView):
    roles = {"POST": {AGENT}}

    @extend_schema(request=ApprovalRequestInputSerializer, responses={201: ApprovalOutputSerializer})
    def post(self, request, run_id):
        data = _validated(ApprovalRequestInputSerializer, request)
        approval, created = services.approval_request(run_id=run_id, kind=data["kind"], stage=data["stage"],
                                                      action=data["action"], actor=actor_for(request.user),
                                                      user=request.user)
        return Response(ApprovalOutputSerializer(approval).data,
                        status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)


class ApprovalFilter(filters.FilterSet):
    status = filters.ChoiceFilter(choices=Approval.Status.choices)
    kind = filters.ChoiceFilter(choices=Approval.Kind.choices)
    run = filters.UUIDFilter(field_name="run_id")

    class Meta:
        model = Approval
        fields = ["status", "kind", "run"]


class ApprovalListApi(ListAPIView):
    roles = {"GET": ANY}
    serializer_class = ApprovalOutputSerializer
    pagination_class = NewestFirstCursor
    filter_backends = [filters.DjangoFilterBackend]
    filterset_class = ApprovalFilter

    def get_queryset(self):
        return selectors.approval_list(user=self.request.user)


class ReasonInputSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")


class _ApprovalDecisionApi(AuditedAction, APIView):
    roles = {"POST": {EDITOR, ONCALL}}
    approve = True

    def audit_run_id(self, kwargs):
        approval_id = self.audit_uuid(kwargs.get("approval_id"))
        if approval_id is None:
            return None
        return Approval.objects.filter(id=approval_id).values_list("run_id", flat=True).first()

    @extend_schema(request=ReasonInputSerializer, responses=ApprovalOutputSerializer)
    def post(self, request, approval_id):
        reason = _validated(ReasonInputSerializer, request)["reason"]
        approval = self.perform(request, lambda: services.approval_decide(
            approval_id=approval_id, user=request.user, approve=self.approve, reason=reason))
        approval = Approval.objects.select_related("run__workflow").get(id=approval.id)
        return Response(ApprovalOutputSerializer(approval).data)


class ApprovalApproveApi(_ApprovalDecisionApi):
    audit_action = "approve"
    approve = True


class ApprovalRejectApi(_ApprovalDecisionApi):
    audit_action = "reject"
    approve = False


class _OncallActionApi(AuditedAction, APIView):
    """POST {reason} on an escalated run; answers the run (for retry: with its new decision)."""

    roles = {"POST": {ONCALL}}

    def act(self, run_id, user, reason) -> dict:
        raise NotImplementedError

    @extend_schema(request=ReasonInputSerializer, responses=RunOutputSerializer)
    def post(self, request, run_id):
        reason = _validated(ReasonInputSerializer, request)["reason"]
        return Response(self.perform(request, lambda: self.act(run_id, request.user, reason)))


class RunRetryApi(_OncallActionApi):
    audit_action = "retry"

    def act(self, run_id, user, reason):
        return _run_body(services.run_retry(run_id=run_id, user=user, reason=reason))


class RunAbandonApi(_OncallActionApi):
    audit_action = "abandon"

    def act(self, run_id, user, reason):
        return _run_body(services.run_abandon(run_id=run_id, user=user, reason=reason))


class RunCompensateApi(_OncallActionApi):
    audit_action = "compensate"

    def act(self, run_id, user, reason):
        run, approval = services.run_compensate(run_id=run_id, user=user, reason=reason)
        return _run_body(run, approval=ApprovalOutputSerializer(approval).data if approval else None)


# ---------------------------------------------------------------- effects and metrics

class EffectFilter(filters.FilterSet):
    run = filters.UUIDFilter(field_name="run_id")
    status = filters.ChoiceFilter(choices=Effect._meta.get_field("status").choices)
    idempotency_key = filters.CharFilter()
    workflow = filters.CharFilter(field_name="workflow__slug")

    class Meta:
        model = Effect
        fields = ["run", "status", "idempotency_key", "workflow"]


class EffectListApi(ListAPIView):
    roles = {"GET": ANY}
    serializer_class = EffectOutputSerializer
    pagination_class = NewestFirstCursor
    filter_backends = [filters.DjangoFilterBackend]
    filterset_class = EffectFilter

    def get_queryset(self):
        return selectors.effect_list(user=self.request.user)


class MetricsApi(APIView):
    roles = {"GET": ANY}

    @extend_schema(responses={200: OpenApiResponse(description="SPEC §7 metrics")})
    def get(self, request):
        since = request.query_params.get("since")
        since_at = services.parse_moment(since) if since else None
        if since and since_at is None:
            raise Invalid("validation_error", "since must be an ISO 8601 date-time.")
        return Response(selectors.metrics(workflow_slug=request.query_params.get("workflow") or None,
                                          since=since_at))
