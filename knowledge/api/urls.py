"""Claims API under /api/v1/. Keys may hold dots and slashes, so ``<path:key>`` is used and the
action routes come first; the write gate refuses keys whose last segment is an action name."""

from django.urls import path

from knowledge.api import claims as api

app_name = "knowledge_api"

urlpatterns = [
    path("claims/", api.ClaimListProposeApi.as_view(), name="claim_list"),
    path("claims/<path:key>/refresh/", api.ClaimRefreshApi.as_view(), name="claim_refresh"),
    path("claims/<path:key>/accept/", api.ClaimAcceptApi.as_view(), name="claim_accept"),
    path("claims/<path:key>/invalidate/", api.ClaimInvalidateApi.as_view(), name="claim_invalidate"),
    path("claims/<path:key>/revoke/", api.ClaimRevokeApi.as_view(), name="claim_revoke"),
    path("claims/<path:key>/", api.ClaimDetailApi.as_view(), name="claim_detail"),
    path("knowledge/reconcile/", api.KnowledgeReconcileApi.as_view(), name="knowledge_reconcile"),
]
