"""``/workflows/{slug}/goals/``: goal versions of an intent (SPEC §10.1)."""

from drf_spectacular.utils import inline_serializer
from rest_framework import serializers, status
from rest_framework.response import Response

from ledger import authorizers, services
from ledger.api.common import agents_of_slug, body_of
from ledger.api.operations import OPS
from ledger.models import Goal, Workflow
from stateboard.errors import Invalid, NotFound
from stateboard.openapi import operation, page_of
from stateboard.policy import ANY, Policy, PolicyApi


class GoalOutputSerializer(serializers.ModelSerializer):
    workflow = serializers.SlugRelatedField(slug_field="slug", read_only=True)

    class Meta:
        model = Goal
        fields = ["workflow", "intent", "version", "objective", "constraints", "acceptance", "change",
                  "created_by", "created_at"]


GOAL_FIELDS = ("intent", "objective", "constraints", "acceptance", "change")



class GoalListCreateApi(PolicyApi):
    policy = {"GET": Policy(roles=ANY),
              "POST": Policy(roles=ANY, authorizer=authorizers.may_post_goal, agents=agents_of_slug,
                             audit="goal_create", audit_all=True)}

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
        body = body_of(request)
        unknown = sorted(set(body) - set(GOAL_FIELDS))
        if unknown:
            raise Invalid("validation_error", f"Unknown fields: {', '.join(unknown)}.", fields=unknown)
        goal, moves = services.goal_create(
            workflow_slug=slug, intent=body.get("intent"), objective=body.get("objective"),
            constraints=body.get("constraints"), acceptance=body.get("acceptance"),
            change=body.get("change", "amend"), user=request.user)
        return Response({**GoalOutputSerializer(goal).data, **moves}, status=status.HTTP_201_CREATED)

