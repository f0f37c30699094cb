"""On-call's actions on a run: retry, abandon, compensate an escalation, roll a run back (SPEC §10.2)."""

from rest_framework import serializers
from rest_framework.response import Response

from ledger import authorizers, services
from ledger.api.common import ReasonInputSerializer, body_of, run_of_path, validated
from ledger.api.operations import OPS
from ledger.api.shapes import ApprovalOutputSerializer, RunOutputSerializer, run_body
from stateboard.openapi import operation
from stateboard.policy import ANY, Policy, PolicyApi


def _action(authorizer, action: str) -> dict:
    return {"POST": Policy(roles=ANY, authorizer=authorizer, subject=run_of_path, audit=action, audit_all=True)}


class RunRetryApi(PolicyApi):
    """POST {reason} on an escalated run; answers the run with its new decision."""

    policy = _action(authorizers.may_retry, "retry")

    @operation(OPS["runs_retry_create"], request=ReasonInputSerializer, responses={200: RunOutputSerializer})
    def post(self, request, run_id):
        reason = validated(ReasonInputSerializer, body_of(request))["reason"]
        return Response(run_body(services.run_retry(run_id=run_id, user=request.user, reason=reason)))


class RunAbandonApi(PolicyApi):
    policy = _action(authorizers.may_abandon, "abandon")

    @operation(OPS["runs_abandon_create"], request=ReasonInputSerializer, responses={200: RunOutputSerializer})
    def post(self, request, run_id):
        reason = validated(ReasonInputSerializer, body_of(request))["reason"]
        return Response(run_body(services.run_abandon(run_id=run_id, user=request.user, reason=reason)))


class RunCompensateApi(PolicyApi):
    policy = _action(authorizers.may_compensate, "compensate")

    @operation(OPS["runs_compensate_create"], request=ReasonInputSerializer, responses={200: RunOutputSerializer})
    def post(self, request, run_id):
        reason = validated(ReasonInputSerializer, body_of(request))["reason"]
        run, approval = services.run_compensate(run_id=run_id, user=request.user, reason=reason)
        return Response(run_body(run, approval=ApprovalOutputSerializer(approval).data if approval else None))


class RollbackInputSerializer(serializers.Serializer):
    to_stage = serializers.CharField(max_length=100)
    reason = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")
    compensate = serializers.BooleanField(required=False, default=False)


class RunRollbackApi(PolicyApi):
    """On-call or an owner rolls a finished run back to a stage; a refusal is audited."""

    policy = {"POST": Policy(roles=ANY, authorizer=authorizers.may_rollback, subject=run_of_path, audit="rollback",
                             audit_all=True)}

    @operation(OPS["runs_rollback_create"], request=RollbackInputSerializer, responses={200: RunOutputSerializer})
    def post(self, request, run_id):
        data = validated(RollbackInputSerializer, body_of(request))
        run = services.run_rollback(run_id=run_id, user=request.user, to_stage=data["to_stage"],
                                    reason=data["reason"], compensate=data["compensate"])
        return Response(run_body(run))
