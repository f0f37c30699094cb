from django.urls import path, re_path

from ledger import views, views_notifications, views_rollback

app_name = "ledger"
urlpatterns = [
    path("runs/", views.run_list, name="run_list"),
    path("runs/compare/", views.run_compare, name="run_compare"),
    path("runs/views/", views.saved_view_create, name="saved_view_create"),
    path("runs/<uuid:run_id>/", views.run_detail, name="run_detail"),
    re_path(r"^runs/(?P<prefix>[0-9a-fA-F-]{4,35})/$", views.run_prefix, name="run_prefix"),
    path("runs/<uuid:run_id>/goal-rollback/", views_rollback.run_goal_rollback, name="run_goal_rollback"),
    path("runs/<uuid:run_id>/rollback/", views_rollback.run_rollback, name="run_rollback"),
    path("approvals/", views.approval_list, name="approval_list"),
    path("approvals/<uuid:approval_id>/approve/", views.approval_approve, name="approval_approve"),
    path("approvals/<uuid:approval_id>/reject/", views.approval_reject, name="approval_reject"),
    path("oncall/", views.oncall, name="oncall"),
    path("oncall/preview/", views.oncall_preview, name="oncall_preview"),
    path("oncall/bulk/", views.oncall_bulk, name="oncall_bulk"),
    path("oncall/runs/<uuid:run_id>/retry/", views.run_retry, name="run_retry"),
    path("oncall/runs/<uuid:run_id>/compensate/", views.run_compensate, name="run_compensate"),
    path("oncall/runs/<uuid:run_id>/abandon/", views.run_abandon, name="run_abandon"),
    path("notifications/", views_notifications.notification_list, name="notification_list"),
    path("notifications/<int:notification_id>/read/", views_notifications.notification_read, name="notification_read"),
    path("reports/", views.reports, name="reports"),
    path("workflows/", views.workflow_list, name="workflow_list"),
    path("workflows/<slug:slug>/", views.workflow_detail, name="workflow_detail"),
]
