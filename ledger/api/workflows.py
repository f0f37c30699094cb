"""``/workflows/``: definitions, read by anyone signed in, written by owners."""

from rest_framework import serializers, status
from rest_framework.response import Response

from ledger import authorizers, services
from ledger.api.common import body_of, validated
from ledger.api.operations import OPS
from ledger.api.shapes import WorkflowOutputSerializer
from ledger.models import Workflow
from stateboard.errors import Invalid, NotFound
from stateboard.openapi import operation, page_of
from stateboard.policy import ANY, Policy, PolicyApi


def _edit(action: str, **more) -> Policy:
    return Policy(roles=ANY, authorizer=authorizers.may_edit_workflow, audit=action, **more)


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
    alerts = serializers.JSONField(required=False, help_text="alert rules (SPEC §14): [{name, kind, severity, "
                                                             "notify, attributes?, ...}]")
    budget = serializers.JSONField(required=False, help_text="SPEC §16: {tokens_per_run?, cost_usd_per_run?, "
                                                             "cost_usd_per_day?} (costs: numbers or decimal strings)")
    approval_rules = serializers.JSONField(required=False, help_text="SPEC §17: {stage: {approvers: [user:<name> | "
                                                                     "group:<name> | role:editor], quorum: 1-5, "
                                                                     "action_schema?}}")


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


class StrictBooleanField(serializers.BooleanField):
    """true or false only (DRF's also takes "yes", 1, "on": types are never converted here)."""

    def to_internal_value(self, data):
        if not isinstance(data, bool):
            self.fail("invalid", input=data)
        return data


class WorkflowApplyInputSerializer(serializers.Serializer):
    workflows = serializers.ListField(
        child=serializers.JSONField(), max_length=1000,
        help_text="whole definitions: the fields of POST /workflows/ plus `owner` (a username or null) and "
                  "`agents`; an omitted field takes its default; a value of the wrong type is refused")
    dry_run = StrictBooleanField(required=False, default=False, help_text="answer the same, write nothing")
    prune = StrictBooleanField(required=False, default=False,
                               help_text="archive the workflows the caller applied last that `workflows` does not "
                                         "name")
    prune_all = StrictBooleanField(required=False, default=False,
                                   help_text="archive every workflow the caller owns that `workflows` does not name")


class FieldChangeSerializer(serializers.Serializer):
    old = serializers.JSONField(allow_null=True)
    new = serializers.JSONField(allow_null=True)


class ApplyOutcomeSerializer(serializers.Serializer):
    workflow = serializers.CharField()
    result = serializers.ChoiceField(choices=["created", "changed", "unchanged", "archived", "restored"])
    changes = serializers.DictField(child=FieldChangeSerializer(), help_text="each changed field, old → new")


class ApplyOutputSerializer(serializers.Serializer):
    dry_run = serializers.BooleanField()
    results = ApplyOutcomeSerializer(many=True)


class WorkflowApplyApi(PolicyApi):
    """Workflows as code over HTTP: the same apply as ``manage.py apply`` (``services.workflows_apply``)."""

    policy = {"POST": _edit("workflow_apply", audit_all=True)}

    @operation(OPS["workflows_apply_create"], request=WorkflowApplyInputSerializer,
               responses={200: ApplyOutputSerializer})
    def post(self, request):
        data = validated(WorkflowApplyInputSerializer, body_of(request))
        if data["prune"] and data["prune_all"]:
            raise Invalid("validation_error", "Give prune or prune_all, not both.", errors={"prune_all": ["or prune"]})
        outcomes = services.workflows_apply(definitions=data["workflows"], user=request.user, dry_run=data["dry_run"],
                                            prune="all" if data["prune_all"] else "apply" if data["prune"] else "")
        return Response({"dry_run": data["dry_run"], "results": [outcome.as_dict() for outcome in outcomes]})
