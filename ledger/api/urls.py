from django.urls import path

from ledger.api import alerts, approvals, checkpoints, effects, events, goals, notifications, oncall, resume, runs, workflows

urlpatterns = [
    path("workflows/", workflows.WorkflowListCreateApi.as_view(), name="workflow_list"),
    path("workflows/apply/", workflows.WorkflowApplyApi.as_view(), name="workflow_apply"),  # before <slug>
    path("workflows/<slug:slug>/", workflows.WorkflowDetailApi.as_view(), name="workflow_detail"),
    path("workflows/<slug:slug>/alerts/<slug:rule>/silence/", alerts.AlertSilenceApi.as_view(), name="alert_silence"),
    path("workflows/<slug:slug>/goals/", goals.GoalListCreateApi.as_view(), name="workflow_goals"),
    path("runs/", runs.RunListCreateApi.as_view(), name="run_list"),
    path("runs/lease/", runs.RunLeaseApi.as_view(), name="run_lease"),
    path("runs/<uuid:run_id>/", runs.RunDetailApi.as_view(), name="run_detail"),
    path("runs/<uuid:run_id>/resume-packet/", resume.RunResumePacketApi.as_view(), name="run_resume_packet"),
    path("runs/<uuid:run_id>/events/", events.RunEventsApi.as_view(), name="run_events"),
    path("runs/<uuid:run_id>/verify-chain/", runs.RunVerifyChainApi.as_view(), name="run_verify_chain"),
    path("runs/<uuid:run_id>/checkpoints/", checkpoints.RunCheckpointCreateApi.as_view(), name="run_checkpoint_create"),
    path("runs/<uuid:run_id>/checkpoint/", checkpoints.RunCheckpointLatestApi.as_view(), name="run_checkpoint_latest"),
    path("runs/<uuid:run_id>/approvals/", approvals.RunApprovalCreateApi.as_view(), name="run_approval_create"),
    path("runs/<uuid:run_id>/retry/", oncall.RunRetryApi.as_view(), name="run_retry"),
    path("runs/<uuid:run_id>/compensate/", oncall.RunCompensateApi.as_view(), name="run_compensate"),
    path("runs/<uuid:run_id>/abandon/", oncall.RunAbandonApi.as_view(), name="run_abandon"),
    path("runs/<uuid:run_id>/rollback/", oncall.RunRollbackApi.as_view(), name="run_rollback"),
    path("approvals/", approvals.ApprovalListApi.as_view(), name="approval_list"),
    path("approvals/<uuid:approval_id>/approve/", approvals.ApprovalApproveApi.as_view(), name="approval_approve"),
    path("approvals/<uuid:approval_id>/reject/", approvals.ApprovalRejectApi.as_view(), name="approval_reject"),
    path("alerts/", alerts.AlertListApi.as_view(), name="alert_list"),
    path("alerts/<str:alert_id>/", alerts.AlertDetailApi.as_view(), name="alert_detail"),
    path("alerts/<str:alert_id>/acknowledge/", alerts.AlertAcknowledgeApi.as_view(), name="alert_acknowledge"),
    path("alerts/<str:alert_id>/resolve/", alerts.AlertResolveApi.as_view(), name="alert_resolve"),
    path("effects/", effects.EffectListApi.as_view(), name="effect_list"),
    path("metrics/", effects.MetricsApi.as_view(), name="metrics"),
    path("notifications/", notifications.NotificationListApi.as_view(), name="notification_list"),
    path("notifications/<str:notification_id>/read/", notifications.NotificationReadApi.as_view(),
         name="notification_read"),
]
