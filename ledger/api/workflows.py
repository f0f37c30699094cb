"""``/workflows/``: definitions, read by anyone signed in, written by owners."""

from rest_framework import serializers, status
from rest_framework.response import Response

from ledger import authorizers, services
from ledger.api.common import body_of, validated
from stateboard.openapi import operation, page_of
from ledger.api.operations import OPS
from ledger.api.shapes import WorkflowOutputSerializer
from ledger.models import Workflow
from stateboard.errors import NotFound
from stateboard.policy import ANY, Policy, PolicyApi

def _edit(action: str) -> Policy:
    return Policy(roles=ANY, authorizer=authorizers.may_edit_workflow, audit=action)


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
    agents = serializers.ListField(child=serializers.CharField(max_length=150), required=False, max_length=1000,
                                   help_text="agent names allowed to serve it; empty: every agent")


class WorkflowPatchInputSerializer(WorkflowInputSerializer):
    slug = None
    reason = serializers.CharField(max_length=2000, required=False, allow_blank=True)


class WorkflowListCreateApi(PolicyApi):
    policy = {"GET": Policy(roles=ANY), "POST": _edit("workflow_create")}

    @operation(OPS["workflows_list"], responses={200: page_of("WorkflowList", WorkflowOutputSerializer)})
    def get(self, request):
        workflows = Workflow.objects.select_related("owner")
        return Response({"results": WorkflowOutputSerializer(workflows, many=True, context={"request": request}).data,
                         "next": None})

    @operation(OPS["workflows_create"], request=WorkflowInputSerializer, responses={201: WorkflowOutputSerializer})
    def post(self, request):
        data = validated(WorkflowInputSerializer, body_of(request))
        workflow = services.workflow_create(user=request.user, data=data)
        return Response(WorkflowOutputSerializer(workflow, context={"request": request}).data,
                        status=status.HTTP_201_CREATED)


class WorkflowDetailApi(PolicyApi):
    policy = {"GET": Policy(roles=ANY), "PATCH": _edit("workflow_update")}

    @operation(OPS["workflows_retrieve"], responses={200: WorkflowOutputSerializer})
    def get(self, request, slug):
        workflow = Workflow.objects.select_related("owner").filter(slug=slug).first()
        if workflow is None:
            raise NotFound("workflow_not_found", f"No workflow {slug!r}.")
        return Response(WorkflowOutputSerializer(workflow, context={"request": request}).data)

    @operation(OPS["workflows_partial_update"], request=WorkflowPatchInputSerializer,
               responses={200: WorkflowOutputSerializer})
    def patch(self, request, slug):
        if not Workflow.objects.filter(slug=slug).exists():
            raise NotFound("workflow_not_found", f"No workflow {slug!r}.")
        data = dict(validated(WorkflowPatchInputSerializer, body_of(request)))
        reason = data.pop("reason", "")
        workflow = services.workflow_update(user=request.user, slug=slug, data=data, reason=reason)
        return Response(WorkflowOutputSerializer(workflow, context={"request": request}).data)
