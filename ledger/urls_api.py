from django.urls import path

from ledger import api, api_goals, api_humans, api_notifications, api_resume

urlpatterns = [
    path("workflows/", api.WorkflowListCreateApi.as_view(), name="workflow_list"),
    path("workflows/<slug:slug>/", api.WorkflowDetailApi.as_view(), name="workflow_detail"),
    path("workflows/<slug:slug>/goals/", api_goals.GoalListCreateApi.as_view(), name="workflow_goals"),
    path("runs/", api.RunListCreateApi.as_view(), name="run_list"),
    path("runs/lease/", api.RunLeaseApi.as_view(), name="run_lease"),
    path("runs/<uuid:run_id>/", api.RunDetailApi.as_view(), name="run_detail"),
    path("runs/<uuid:run_id>/resume-packet/", api_resume.RunResumePacketApi.as_view(), name="run_resume_packet"),
    path("runs/<uuid:run_id>/events/", api.RunEventsApi.as_view(), name="run_events"),
    path("runs/<uuid:run_id>/verify-chain/", api.RunVerifyChainApi.as_view(), name="run_verify_chain"),
    path("runs/<uuid:run_id>/checkpoints/", api.RunCheckpointCreateApi.as_view(), name="run_checkpoint_create"),
    path("runs/<uuid:run_id>/checkpoint/", api.RunCheckpointLatestApi.as_view(), name="run_checkpoint_latest"),
    path("runs/<uuid:run_id>/approvals/", api_humans.RunApprovalCreateApi.as_view(), name="run_approval_create"),
    path("runs/<uuid:run_id>/retry/", api_humans.RunRetryApi.as_view(), name="run_retry"),
    path("runs/<uuid:run_id>/compensate/", api_humans.RunCompensateApi.as_view(), name="run_compensate"),
    path("runs/<uuid:run_id>/abandon/", api_humans.RunAbandonApi.as_view(), name="run_abandon"),
    path("runs/<uuid:run_id>/rollback/", api_goals.RunRollbackApi.as_view(), name="run_rollback"),
    path("approvals/", api_humans.ApprovalListApi.as_view(), name="approval_list"),
    path("approvals/<uuid:approval_id>/approve/", api_humans.ApprovalApproveApi.as_view(), name="approval_approve"),
    path("approvals/<uuid:approval_id>/reject/", api_humans.ApprovalRejectApi.as_view(), name="approval_reject"),
    path("effects/", api.EffectListApi.as_view(), name="effect_list"),
    path("metrics/", api.MetricsApi.as_view(), name="metrics"),
    path("notifications/", api_notifications.NotificationListApi.as_view(), name="notification_list"),
    path("notifications/<str:notification_id>/read/", api_notifications.NotificationReadApi.as_view(),
         name="notification_read"),
]
