"""The caller's notifications (SPEC §5.3): ``GET /notifications/`` and ``POST /notifications/{id}/read/``."""

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter
from rest_framework import serializers
from rest_framework.response import Response

from ledger import selectors, services
from ledger.api.common import NewestFirstCursor, PolicyListApi
from ledger.api.operations import OPS
from ledger.models import Notification
from stateboard.openapi import operation
from stateboard.policy import ANY, Policy, PolicyApi


class NotificationOutputSerializer(serializers.ModelSerializer):
    class Meta:
        model = Notification
        fields = ["id", "kind", "subject", "url", "created_at", "read_at", "run", "intent", "claim", "done"]

    run = serializers.UUIDField(source="run_id", read_only=True, allow_null=True,
                                help_text="The run it is about, if any.")
    claim = serializers.CharField(source="claim_key", read_only=True,
                                  help_text="The claim key it is about, or empty.")


def _flag(value) -> bool:
    return str(value or "").strip().lower() in {"1", "true", "yes", "on"}


class NotificationListApi(PolicyListApi):
    policy = {"GET": Policy(roles=ANY)}
    serializer_class = NotificationOutputSerializer
    pagination_class = NewestFirstCursor

    @operation(OPS["notifications_list"], responses={200: NotificationOutputSerializer},
               parameters=[OpenApiParameter("unread", OpenApiTypes.BOOL, description="1: hide read ones")])
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    def get_queryset(self):
        return selectors.notifications_for(user=self.request.user,
                                           unread=_flag(self.request.query_params.get("unread")))


class NotificationReadApi(PolicyApi):
    policy = {"POST": Policy(roles=ANY)}

    @operation(OPS["notifications_read_create"], responses={200: NotificationOutputSerializer})
    def post(self, request, notification_id):
        notification = services.notification_read(notification_id=notification_id, user=request.user)
        return Response(NotificationOutputSerializer(notification).data)

