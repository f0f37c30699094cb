from django.urls import path, re_path

from ledger import web
from ledger.web import account, agents, alerts, amend, approval_links, notifications, rollback, sso

app_name = "ledger"
urlpatterns = [
    path("runs/", web.run_list, name="run_list"),
    path("runs/compare/", web.run_compare, name="run_compare"),
    path("runs/views/", web.saved_view_create, name="saved_view_create"),
    path("runs/<uuid:run_id>/", web.run_detail, name="run_detail"),
    re_path(r"^runs/(?P<prefix>[0-9a-fA-F-]{4,35})/$", web.run_prefix, name="run_prefix"),
    path("runs/<uuid:run_id>/goal-rollback/", rollback.run_goal_rollback, name="run_goal_rollback"),
    path("runs/<uuid:run_id>/rollback/", rollback.run_rollback, name="run_rollback"),
    path("approvals/", web.approval_list, name="approval_list"),
    path("approvals/<uuid:approval_id>/approve/", web.approval_approve, name="approval_approve"),
    path("approvals/<uuid:approval_id>/reject/", web.approval_reject, name="approval_reject"),
    path("approvals/<uuid:approval_id>/email/<str:token>/", approval_links.approval_link, name="approval_link"),
    path("approvals/<uuid:approval_id>/amend/", amend.approval_amend, name="approval_amend"),
    path("oncall/", web.oncall, name="oncall"),
    path("oncall/preview/", web.oncall_preview, name="oncall_preview"),
    path("oncall/bulk/", web.oncall_bulk, name="oncall_bulk"),
    path("oncall/runs/<uuid:run_id>/retry/", web.run_retry, name="run_retry"),
    path("oncall/runs/<uuid:run_id>/compensate/", web.run_compensate, name="run_compensate"),
    path("oncall/runs/<uuid:run_id>/abandon/", web.run_abandon, name="run_abandon"),
    path("alerts/", alerts.alert_list, name="alert_list"),
    path("alerts/<int:alert_id>/acknowledge/", alerts.alert_acknowledge, name="alert_acknowledge"),
    path("alerts/<int:alert_id>/resolve/", alerts.alert_resolve, name="alert_resolve"),
    path("agents/", agents.agent_list, name="agent_list"),
    path("agents/<str:name>/revoke/", agents.agent_revoke, name="agent_revoke"),
    path("notifications/", notifications.notification_list, name="notification_list"),
    path("notifications/<int:notification_id>/read/", notifications.notification_read, name="notification_read"),
    path("notifications/read-all/", notifications.notification_read_all, name="notification_read_all"),
    path("notifications/link/", notifications.notification_link, name="notification_link"),
    path("reports/", web.reports, name="reports"),
    path("workflows/", web.workflow_list, name="workflow_list"),
    path("workflows/<slug:slug>/", web.workflow_detail, name="workflow_detail"),
    path("account/", account.account, name="account"),
    path("login/sso/", sso.sso_start, name="sso_start"),
    path("login/sso/callback/", sso.sso_callback, name="sso_callback"),
]
