"""Approvals: the requests agents raise (``/runs/{id}/approvals/``) and the decisions people make."""

from django_filters import rest_framework as filters
from drf_spectacular.utils import extend_schema_view
from rest_framework import serializers, status
from rest_framework.response import Response

from ledger import authorizers, selectors, services
from ledger.api.common import (
    NewestFirstCursor,
    PolicyListApi,
    ReasonInputSerializer,
    agents_of_run,
    approval_of_path,
    body_of,
    validated,
)
from ledger.api.components import ApprovalRequestSerializer
from ledger.api.operations import OPS
from ledger.api.shapes import ApprovalOutputSerializer
from ledger.filters import StrictFilterBackend
from ledger.models import Approval
from stateboard.openapi import operation
from stateboard.policy import ANY, Policy, PolicyApi
from stateboard.roles import actor_for


class ApprovalRequestInputSerializer(serializers.Serializer):
    kind = serializers.CharField()
    stage = serializers.CharField(max_length=100)
    action = serializers.JSONField()


class RunApprovalCreateApi(PolicyApi):
    policy = {"POST": Policy(roles=ANY, authorizer=authorizers.may_request_approval, run_scope="holder",
                             agents=agents_of_run, audit="approval_request")}

    @operation(OPS["runs_approvals_create"], request=ApprovalRequestSerializer,
               responses={201: ApprovalOutputSerializer, 200: ApprovalOutputSerializer})
    def post(self, request, run_id):
        data = validated(ApprovalRequestInputSerializer, body_of(request))
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


@extend_schema_view(get=operation(OPS["approvals_list"], responses={200: ApprovalOutputSerializer}))
class ApprovalListApi(PolicyListApi):
    policy = {"GET": Policy(roles=ANY)}
    serializer_class = ApprovalOutputSerializer
    pagination_class = NewestFirstCursor
    filter_backends = [StrictFilterBackend]
    filterset_class = ApprovalFilter

    def get_queryset(self):
        return selectors.approval_list()



def _decide(action: str) -> Policy:
    return Policy(roles=ANY, authorizer=authorizers.may_decide_approval, subject=approval_of_path, audit=action,
                  audit_all=True)


class _ApprovalDecisionApi(PolicyApi):
    approve = True

    def _decide(self, request, approval_id):
        reason = validated(ReasonInputSerializer, body_of(request))["reason"]
        approval = services.approval_decide(approval_id=approval_id, user=request.user, approve=self.approve,
                                            reason=reason)
        return Response(ApprovalOutputSerializer(selectors.approval_get(approval_id=approval.id)).data)


class ApprovalApproveApi(_ApprovalDecisionApi):
    policy = {"POST": _decide("approve")}
    approve = True

    @operation(OPS["approvals_approve_create"], request=ReasonInputSerializer, responses={200: ApprovalOutputSerializer})
    def post(self, request, approval_id):
        return self._decide(request, approval_id)


class ApprovalRejectApi(_ApprovalDecisionApi):
    policy = {"POST": _decide("reject")}
    approve = False

    @operation(OPS["approvals_reject_create"], request=ReasonInputSerializer, responses={200: ApprovalOutputSerializer})
    def post(self, request, approval_id):
        return self._decide(request, approval_id)


class ApprovalAmendInputSerializer(serializers.Serializer):
    action = serializers.JSONField(help_text="the amended action: it satisfies the stage's action_schema (without "
                                             "one, any object)")
    reason = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="",
                                   help_text="why (required): kept with the voided request and the new one")


class ApprovalAmendApi(PolicyApi):
    """SPEC §17: an eligible approver amends a pending request instead of deciding it."""

    policy = {"POST": Policy(roles=ANY, authorizer=authorizers.may_amend_approval, subject=approval_of_path,
                             audit="amend", audit_all=True)}

    @operation(OPS["approvals_amend_create"], request=ApprovalAmendInputSerializer,
               responses={201: ApprovalOutputSerializer})
    def post(self, request, approval_id):
        data = validated(ApprovalAmendInputSerializer, body_of(request))
        amended = services.approval_amend(approval_id=approval_id, user=request.user, action=data["action"],
                                          reason=data["reason"])
        return Response(ApprovalOutputSerializer(selectors.approval_get(approval_id=amended.id)).data,
                        status=status.HTTP_201_CREATED)
