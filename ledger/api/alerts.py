"""``/alerts/`` (SPEC §14): on-call, owners and editors read; on-call acknowledges and resolves; on-call or an
owner silences a workflow's rule (``/workflows/{slug}/alerts/{rule}/silence/``)."""

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter
from rest_framework import serializers
from rest_framework.response import Response

from ledger import authorizers, selectors, services
from ledger.api.common import body_of, validated
from ledger.api.operations import OPS
from ledger.domain.alerts import SEVERITIES
from ledger.models import AlertSilence, Workflow
from stateboard.errors import DomainError, NotFound
from stateboard.openapi import operation
from stateboard.policy import Policy, PolicyApi
from stateboard.roles import EDITOR, ONCALL, OWNER

READERS = frozenset({ONCALL, OWNER, EDITOR})
LIST_MAX = 500


class AlertChangeSerializer(serializers.Serializer):
    state = serializers.CharField()
    by = serializers.CharField()
    at = serializers.DateTimeField()
    reason = serializers.CharField()


class AlertDeliverySerializer(serializers.Serializer):
    channel = serializers.CharField()
    state = serializers.CharField(help_text="pending, retrying or delivered")
    change = serializers.CharField(help_text="the alert state this delivery carries")
    attempts = serializers.IntegerField()
    last_error = serializers.CharField()


class AlertOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    key = serializers.CharField(help_text="<workflow>/<rule>/<subject>")
    workflow = serializers.CharField(source="workflow.slug")
    rule = serializers.CharField()
    kind = serializers.CharField()
    severity = serializers.CharField()
    state = serializers.CharField()
    subject = serializers.CharField()
    summary = serializers.CharField()
    runs = serializers.SerializerMethodField(help_text="the runs concerned")
    approval = serializers.UUIDField(source="approval_id", allow_null=True)
    opened_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    resolved_at = serializers.DateTimeField(allow_null=True)
    history = AlertChangeSerializer(many=True, source="changes.all")
    deliveries = serializers.SerializerMethodField()

    def get_runs(self, alert) -> list[str]:
        return [str(alert.run_id)] if alert.run_id else []

    def get_deliveries(self, alert) -> list[dict]:
        found = self.context.get("deliveries")
        found = found if found is not None else services.deliveries_of([alert.id])
        return AlertDeliverySerializer(found.get(alert.id, []), many=True).data


def alert_bodies(alerts) -> list[dict]:
    """Bodies of ``alerts`` (their history prefetched), deliveries read once for all."""
    alerts = list(alerts)
    deliveries = services.deliveries_of([a.id for a in alerts])
    return AlertOutputSerializer(alerts, many=True, context={"deliveries": deliveries}).data


class AlertListApi(PolicyApi):
    policy = {"GET": Policy(roles=READERS)}

    @operation(OPS["alerts_list"], responses={200: AlertOutputSerializer(many=True)}, parameters=[
        OpenApiParameter("state", OpenApiTypes.STR, description="open, firing, acknowledged or resolved"),
        OpenApiParameter("workflow", OpenApiTypes.STR), OpenApiParameter("severity", OpenApiTypes.STR)])
    def get(self, request):
        query = request.query_params
        state, severity = query.get("state", ""), query.get("severity", "")
        if state not in ("", "open", "firing", "acknowledged", "resolved") or severity not in ("", *SEVERITIES):
            raise DomainError("invalid_filter", "state: open|firing|acknowledged|resolved; severity: page|ticket|info.",
                              status_code=400)
        alerts = selectors.alerts_listed(state=state, workflow=query.get("workflow", ""), severity=severity)
        return Response({"results": alert_bodies(alerts[:LIST_MAX]), "next": None})


def _alert_id(value: str) -> int:
    if not value.isdigit() or len(value) > 18:
        raise NotFound("alert_not_found", f"No alert {value!r}.")
    return int(value)


def _alert(alert_id):
    alert = selectors.alerts_listed().filter(id=_alert_id(alert_id)).first()
    if alert is None:
        raise NotFound("alert_not_found", f"No alert {alert_id}.")
    return alert


class AlertDetailApi(PolicyApi):
    policy = {"GET": Policy(roles=READERS)}

    @operation(OPS["alerts_retrieve"], responses={200: AlertOutputSerializer})
    def get(self, request, alert_id):
        return Response(alert_bodies([_alert(alert_id)])[0])


class NoteInputSerializer(serializers.Serializer):
    note = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")


class RequiredReasonSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=2000)


def _handle(action: str) -> dict:
    return {"POST": Policy(roles=READERS, authorizer=authorizers.may_handle_alert, audit=action, audit_all=True)}


class AlertAcknowledgeApi(PolicyApi):
    policy = _handle("alert_acknowledge")

    @operation(OPS["alerts_acknowledge_create"], request=NoteInputSerializer, responses={200: AlertOutputSerializer})
    def post(self, request, alert_id):
        note = validated(NoteInputSerializer, body_of(request))["note"]
        services.alert_acknowledge(alert_id=_alert_id(alert_id), user=request.user, note=note)
        return Response(alert_bodies([_alert(alert_id)])[0])


class AlertResolveApi(PolicyApi):
    policy = _handle("alert_resolve")

    @operation(OPS["alerts_resolve_create"], request=RequiredReasonSerializer, responses={200: AlertOutputSerializer})
    def post(self, request, alert_id):
        reason = validated(RequiredReasonSerializer, body_of(request))["reason"]
        services.alert_resolve(alert_id=_alert_id(alert_id), user=request.user, reason=reason)
        return Response(alert_bodies([_alert(alert_id)])[0])


class SilenceInputSerializer(serializers.Serializer):
    minutes = serializers.IntegerField(min_value=1, max_value=525_600)
    reason = serializers.CharField(max_length=2000)


class SilenceOutputSerializer(serializers.ModelSerializer):
    workflow = serializers.CharField(source="workflow.slug")

    class Meta:
        model = AlertSilence
        fields = ["workflow", "rule", "until", "reason", "by", "created_at"]


def _workflow(slug) -> Workflow:
    workflow = Workflow.objects.filter(slug=slug).first()
    if workflow is None:
        raise NotFound("workflow_not_found", f"No workflow {slug!r}.")
    return workflow


class AlertSilenceApi(PolicyApi):
    _policy = Policy(roles=READERS, authorizer=authorizers.may_silence_alert, audit="alert_silence", audit_all=True)
    policy = {"POST": _policy, "DELETE": _policy}

    @operation(OPS["alerts_silence_create"], request=SilenceInputSerializer, responses={200: SilenceOutputSerializer})
    def post(self, request, slug, rule):
        data = validated(SilenceInputSerializer, body_of(request))
        silence = services.silence_set(workflow=_workflow(slug), rule=rule, minutes=data["minutes"],
                                       reason=data["reason"], user=request.user)
        return Response(SilenceOutputSerializer(silence).data)

    @operation(OPS["alerts_silence_destroy"], responses={204: None})
    def delete(self, request, slug, rule):
        services.silence_end(workflow=_workflow(slug), rule=rule, user=request.user)
        return Response(status=204)
