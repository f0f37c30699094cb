"""Claim pages. Action routes come first and carry the key in the POST body; history uses
``<path:key>`` because keys hold slashes (the API lives apart, under /api/v1/claims/)."""

from django.urls import path

from knowledge.web import views

app_name = "knowledge"
urlpatterns = [
    path("claims/", views.claim_list, name="claim_list"),
    path("claims/review/", views.claim_review, name="claim_review"),
    path("claims/review/accept/", views.claim_accept, name="claim_accept"),
    path("claims/review/refresh/", views.claim_refresh, name="claim_refresh"),
    path("claims/review/invalidate/", views.claim_invalidate, name="claim_invalidate"),
    path("claims/review/revoke/", views.claim_revoke, name="claim_revoke"),
    path("claims/<path:key>/history/", views.claim_history, name="claim_history"),
]
