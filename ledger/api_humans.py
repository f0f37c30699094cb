"""Approvals and on-call actions: the requests agents raise and the decisions people make (SPEC §1, §2)."""

from django_filters import rest_framework as filters
from drf_spectacular.utils import extend_schema_view
from rest_framework import serializers, status
from rest_framework.generics import ListAPIView
from rest_framework.response import Response
from rest_framework.views import APIView

from ledger import authorizers, selectors, services
from ledger.api import ApprovalOutputSerializer, NewestFirstCursor, RunOutputSerializer, _get_run, _validated, run_body
from ledger.filters import StrictFilterBackend
from ledger.models import Approval
from ledger.schema_components import ApprovalRequestSerializer, operation
from ledger.schema_operations import OPS
from stateboard.errors import NotFound, Refused
from stateboard.refusals import approval_subject, refusals
from stateboard.roles import ANY, actor_for

# ---------------------------------------------------------------- approvals and on-call

class ApprovalRequestInputSerializer(serializers.Serializer):
    kind = serializers.CharField()
    stage = serializers.CharField(max_length=100)
    action = serializers.JSONField()


class RunApprovalCreateApi(APIView):
    roles = {"POST": ANY}
    authorizer = authorizers.may_request_approval

    @operation(OPS["runs_approvals_create"], request=ApprovalRequestSerializer,
               responses={201: ApprovalOutputSerializer, 200: ApprovalOutputSerializer})
    @refusals("approval_request", audit=(Refused,))
    def post(self, request, run_id):
        authorizers.may_request_approval(request.user, run_id)
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


@extend_schema_view(get=operation(OPS["approvals_list"], responses={200: ApprovalOutputSerializer}))
class ApprovalListApi(ListAPIView):
    roles = {"GET": ANY}
    serializer_class = ApprovalOutputSerializer
    pagination_class = NewestFirstCursor
    filter_backends = [StrictFilterBackend]
    filterset_class = ApprovalFilter

    def get_queryset(self):
        return selectors.approval_list()


class ReasonInputSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")


class _ApprovalDecisionApi(APIView):
    roles = {"POST": ANY}
    authorizer = authorizers.may_decide_approval
    approve = True

    def _decide(self, request, approval_id):
        try:
            approval = selectors.approval_get(approval_id=approval_id)
        except Approval.DoesNotExist:
            raise NotFound("approval_not_found", f"No approval with id {approval_id}.")
        authorizers.may_decide_approval(request.user, approval)
        reason = _validated(ReasonInputSerializer, request)["reason"]
        approval = services.approval_decide(approval_id=approval.id, user=request.user, approve=self.approve,
                                            reason=reason)
        return Response(ApprovalOutputSerializer(selectors.approval_get(approval_id=approval.id)).data)


class ApprovalApproveApi(_ApprovalDecisionApi):
    approve = True

    @operation(OPS["approvals_approve_create"], request=ReasonInputSerializer, responses={200: ApprovalOutputSerializer})
    @refusals("approve", subject=approval_subject)
    def post(self, request, approval_id):
        return self._decide(request, approval_id)


class ApprovalRejectApi(_ApprovalDecisionApi):
    approve = False

    @operation(OPS["approvals_reject_create"], request=ReasonInputSerializer, responses={200: ApprovalOutputSerializer})
    @refusals("reject", subject=approval_subject)
    def post(self, request, approval_id):
        return self._decide(request, approval_id)


class _OncallActionApi(APIView):
    """POST {reason} on an escalated run; answers the run (for retry: with its new decision)."""

    roles = {"POST": ANY}

    def act(self, run_id, user, reason) -> dict:
        raise NotImplementedError

    def _act(self, request, run_id):
        type(self).authorizer(request.user, _get_run(run_id))
        reason = _validated(ReasonInputSerializer, request)["reason"]
        return Response(self.act(run_id, request.user, reason))


class RunRetryApi(_OncallActionApi):
    authorizer = authorizers.may_retry

    @operation(OPS["runs_retry_create"], request=ReasonInputSerializer, responses={200: RunOutputSerializer})
    @refusals("retry")
    def post(self, request, run_id):
        return self._act(request, run_id)

    def act(self, run_id, user, reason):
        return run_body(services.run_retry(run_id=run_id, user=user, reason=reason))


class RunAbandonApi(_OncallActionApi):
    authorizer = authorizers.may_abandon

    @operation(OPS["runs_abandon_create"], request=ReasonInputSerializer, responses={200: RunOutputSerializer})
    @refusals("abandon")
    def post(self, request, run_id):
        return self._act(request, run_id)

    def act(self, run_id, user, reason):
        return run_body(services.run_abandon(run_id=run_id, user=user, reason=reason))


class RunCompensateApi(_OncallActionApi):
    authorizer = authorizers.may_compensate

    @operation(OPS["runs_compensate_create"], request=ReasonInputSerializer, responses={200: RunOutputSerializer})
    @refusals("compensate")
    def post(self, request, run_id):
        return self._act(request, run_id)

    def act(self, run_id, user, reason):
        run, approval = services.run_compensate(run_id=run_id, user=user, reason=reason)
        return run_body(run, approval=ApprovalOutputSerializer(approval).data if approval else None)


