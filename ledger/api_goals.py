"""API of SPEC §10: goal versions of an intent, and rollback of a run to a stage."""

from drf_spectacular.utils import inline_serializer
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from ledger import authorizers, services
from ledger.api import RunOutputSerializer, _body, _get_run, _validated, run_body
from ledger.models import Goal, Workflow
from ledger.schema_components import operation, page_of
from ledger.schema_operations import OPS
from stateboard.errors import Invalid, NotFound
from stateboard.refusals import refusals
from stateboard.roles import AGENT, ANY, EDITOR, OWNER


class GoalOutputSerializer(serializers.ModelSerializer):
    workflow = serializers.SlugRelatedField(slug_field="slug", read_only=True)

    class Meta:
        model = Goal
        fields = ["workflow", "intent", "version", "objective", "constraints", "acceptance", "change",
                  "created_by", "created_at"]


GOAL_FIELDS = ("intent", "objective", "constraints", "acceptance", "change")


class GoalListCreateApi(APIView):
    roles = {"GET": ANY, "POST": {OWNER, EDITOR, AGENT}}

    def _workflow(self, slug) -> Workflow:
        workflow = Workflow.objects.filter(slug=slug).first()
        if workflow is None:
            raise NotFound("workflow_not_found", f"No workflow {slug!r}.")
        return workflow

    @operation(OPS["workflows_goals_list"], responses={200: page_of("GoalList", GoalOutputSerializer)})
    def get(self, request, slug):
        workflow = self._workflow(slug)
        intent = request.query_params.get("intent") or None
        goals = services.goals_of(workflow=workflow, intent=intent).select_related("workflow")[:500]
        return Response({"results": GoalOutputSerializer(goals, many=True).data, "next": None})

    @operation(OPS["workflows_goals_create"], request=inline_serializer("GoalInput", {
        "intent": serializers.CharField(), "objective": serializers.CharField(required=False),
        "constraints": serializers.ListField(child=serializers.CharField(), required=False),
        "acceptance": serializers.ListField(child=serializers.CharField(), required=False),
        "change": serializers.ChoiceField(choices=["amend", "replace"], required=False)}),
        responses={201: GoalOutputSerializer})
    def post(self, request, slug):
        self._workflow(slug)
        body = _body(request)
        unknown = sorted(set(body) - set(GOAL_FIELDS))
        if unknown:
            raise Invalid("validation_error", f"Unknown fields: {', '.join(unknown)}.", fields=unknown)
        goal, moves = services.goal_create(
            workflow_slug=slug, intent=body.get("intent"), objective=body.get("objective"),
            constraints=body.get("constraints"), acceptance=body.get("acceptance"),
            change=body.get("change", "amend"), user=request.user)
        return Response({**GoalOutputSerializer(goal).data, **moves}, status=status.HTTP_201_CREATED)


class RollbackInputSerializer(serializers.Serializer):
    to_stage = serializers.CharField(max_length=100)
    reason = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")
    compensate = serializers.BooleanField(required=False, default=False)


class RunRollbackApi(APIView):
    """On-call or an owner rolls a finished run back to a stage; a refusal is audited."""

    roles = {"POST": ANY}
    authorizer = authorizers.may_rollback

    @operation(OPS["runs_rollback_create"], request=RollbackInputSerializer, responses={200: RunOutputSerializer})
    @refusals("rollback")
    def post(self, request, run_id):
        authorizers.may_rollback(request.user, _get_run(run_id))
        data = _validated(RollbackInputSerializer, request)
        run = services.run_rollback(run_id=run_id, user=request.user, to_stage=data["to_stage"],
                                    reason=data["reason"], compensate=data["compensate"])
        return Response(run_body(run))
