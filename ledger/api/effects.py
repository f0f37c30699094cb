"""``/effects/`` and ``/metrics/``: what happened in the world, and the figures of SPEC §7."""

from django_filters import rest_framework as filters
from drf_spectacular.utils import extend_schema_view
from rest_framework.response import Response

from ledger import metrics_selectors, selectors, services
from ledger.api.common import NewestFirstCursor, PolicyListApi
from ledger.api.components import METRICS
from ledger.api.operations import OPS
from ledger.api.shapes import EffectOutputSerializer
from ledger.filters import StrictFilterBackend
from ledger.models import Effect
from stateboard.errors import Invalid
from stateboard.openapi import operation
from stateboard.policy import ANY, Policy, PolicyApi


class EffectFilter(filters.FilterSet):
    run = filters.UUIDFilter(field_name="run_id")
    status = filters.ChoiceFilter(choices=Effect._meta.get_field("status").choices)
    idempotency_key = filters.CharFilter()
    workflow = filters.CharFilter(field_name="workflow__slug")

    class Meta:
        model = Effect
        fields = ["run", "status", "idempotency_key", "workflow"]


@extend_schema_view(get=operation(OPS["effects_list"], responses={200: EffectOutputSerializer}))
class EffectListApi(PolicyListApi):
    policy = {"GET": Policy(roles=ANY)}
    serializer_class = EffectOutputSerializer
    pagination_class = NewestFirstCursor
    filter_backends = [StrictFilterBackend]
    filterset_class = EffectFilter

    def get_queryset(self):
        return selectors.effect_list()


class MetricsApi(PolicyApi):
    policy = {"GET": Policy(roles=ANY)}

    @operation(OPS["metrics_retrieve"], responses={200: METRICS})
    def get(self, request):
        since = request.query_params.get("since")
        since_at = services.parse_moment(since) if since else None
        if since and since_at is None:
            raise Invalid("validation_error", "since must be an ISO 8601 date-time.")
        return Response(metrics_selectors.metrics(workflow_slug=request.query_params.get("workflow") or None,
                                          since=since_at))

