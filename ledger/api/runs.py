"""``/runs/``: triggers, the list and a run's detail, leases, the chain check."""

import time

from drf_spectacular.utils import OpenApiResponse, extend_schema_view
from rest_framework import serializers, status
from rest_framework.response import Response

from ledger import authorizers, selectors, services
from ledger.api.common import (
    NewestFirstCursor,
    PolicyListApi,
    agents_of_body_workflow,
    agents_of_lease,
    body_of,
    lease_workflows_of,
    run_get,
    validated,
)
from ledger.api.components import ChainReportSerializer
from ledger.api.operations import OPS
from ledger.api.shapes import RunDetailOutputSerializer, RunOutputSerializer, run_body
from ledger.filters import RunFilter, StrictFilterBackend
from ledger.models import Run, Trigger
from stateboard.errors import NotFound
from stateboard.openapi import operation
from stateboard.policy import ANY, Policy, PolicyApi
from stateboard.roles import AGENT, actor_for, has_role
from stateboard.waits import GRANT_HEADER, WAIT_HEADER, WAITS_OUTSIDE


class RunTriggerInputSerializer(serializers.Serializer):
    workflow = serializers.CharField(max_length=100)
    intent = serializers.CharField(max_length=500, required=False, allow_blank=True)
    trigger = serializers.ChoiceField(choices=Trigger.values, required=False)
    trigger_key = serializers.CharField(max_length=500, required=False, allow_blank=True)
    inputs = serializers.JSONField(help_text="a JSON object")
    env_fingerprint = serializers.CharField(max_length=500, required=False, allow_blank=True)
    staged = serializers.BooleanField(required=False, default=False)
    attributes = serializers.JSONField(required=False, allow_null=True,
                                       help_text="SPEC §15: at most 16 keys [a-z][a-z0-9_]{0,39}; each value a string "
                                                 "(≤ 200 characters), an integer, a boolean or an ISO 8601 time "
                                                 "with its zone (422 invalid_attributes otherwise)")

    def validate_inputs(self, value):
        if not isinstance(value, dict):
            raise serializers.ValidationError("inputs must be a JSON object.")
        return value


@extend_schema_view(get=operation(OPS["runs_list"], responses={200: RunOutputSerializer}))
class RunListCreateApi(PolicyListApi):
    policy = {"GET": Policy(roles=ANY),
              "POST": Policy(roles=ANY, authorizer=authorizers.may_trigger, agents=agents_of_body_workflow,
                             audit="trigger")}
    serializer_class = RunOutputSerializer
    pagination_class = NewestFirstCursor
    filter_backends = [StrictFilterBackend]
    filterset_class = RunFilter

    def get_queryset(self):
        return selectors.run_list()

    @operation(OPS["runs_create"], request=RunTriggerInputSerializer,
               responses={201: RunOutputSerializer, 200: RunOutputSerializer})
    def post(self, request):
        arrived = time.monotonic()  # SPEC §7: the trigger's latency runs from here to the committed decision
        data = validated(RunTriggerInputSerializer, body_of(request))
        user = request.user
        trigger = data.get("trigger") or ("api" if has_role(user, AGENT) else "human")
        run, created = services.run_trigger(
            workflow_slug=data["workflow"], intent=data.get("intent") or None, trigger=trigger,
            trigger_key=data.get("trigger_key") or None, inputs=data["inputs"],
            env_fingerprint=data.get("env_fingerprint", ""), actor=actor_for(user), staged=data.get("staged", False),
            arrived=arrived, attributes=data.get("attributes"),
            traceparent=request.headers.get("traceparent", ""))  # SPEC §16: starts the run's trace
        return Response(run_body(run, duplicate=not created),
                        status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)


class RunLeaseInputSerializer(serializers.Serializer):
    workflows = serializers.ListField(child=serializers.CharField(max_length=100), required=False, allow_empty=True)
    wait_seconds = serializers.FloatField(min_value=0, max_value=30, required=False, default=0)


class RunLeaseApi(PolicyApi):
    """SPEC §9.1: the earliest-queued run, now leased to the calling agent (200), or 204."""

    policy = {"POST": Policy(roles=ANY, authorizer=authorizers.may_lease, agents=agents_of_lease, audit="lease")}

    @operation(OPS["runs_lease_create"], request=RunLeaseInputSerializer,
               responses={200: RunDetailOutputSerializer, 204: OpenApiResponse(description="no queued run")})
    def post(self, request):
        data = validated(RunLeaseInputSerializer, body_of(request), strict=True)  # a typo would lease any run
        waits_outside = request.META.get(WAITS_OUTSIDE, False)  # the ASGI entry waits without a thread
        workflows, known = data.get("workflows") or None, lease_workflows_of(request)
        run = services.run_lease(user=request.user, workflows=workflows,
                                 wait_seconds=0 if waits_outside else data["wait_seconds"],
                                 existing=set(known) if workflows and set(workflows) <= set(known) else None)
        if run is None:
            response = Response(status=status.HTTP_204_NO_CONTENT)
            if waits_outside and data["wait_seconds"]:
                response[WAIT_HEADER] = str(data["wait_seconds"])
            return response
        response = Response(RunDetailOutputSerializer(selectors.run_detail(run_id=run.id, intent=run.intent)).data)
        if waits_outside:  # what to give back if the answer cannot be delivered
            response[GRANT_HEADER] = f"{run.id} {run.lease_id} {run.event_count}"
        return response


class RunDetailApi(PolicyApi):
    policy = {"GET": Policy(roles=ANY)}

    @operation(OPS["runs_retrieve"], responses={200: RunDetailOutputSerializer})
    def get(self, request, run_id):
        try:
            run = selectors.run_detail(run_id=run_id)
        except Run.DoesNotExist:
            raise NotFound("run_not_found", f"No run with id {run_id}.")
        return Response(RunDetailOutputSerializer(run).data)


class RunVerifyChainApi(PolicyApi):
    policy = {"GET": Policy(roles=ANY)}

    @operation(OPS["runs_verify_chain_retrieve"], responses={200: ChainReportSerializer})
    def get(self, request, run_id):
        return Response(services.chain_verify(run=run_get(run_id)))
