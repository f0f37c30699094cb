"""Every write to the ledger, one module per family of verbs; each module imports only the modules below it
(the layers are in docs/architecture.md, held by tests/test_architecture.py). Callers outside this package
import every verb from here, one way in.
"""

from ledger.services.alert_delivery import alert_send, deliveries_of
from ledger.services.alerts import alert_acknowledge, alert_resolve, alerts_evaluate, silence_end, silence_set
from ledger.services.apply import file_form, file_parse, outcome_lines, workflows_apply
from ledger.services.approvals import (
    action_validate,
    approval_amend,
    approval_decide,
    approval_request,
    approvals_expire,
    permit_find,
    permit_spend,
)
from ledger.services.audit import audit_record, refusal_audit
from ledger.services.batches import events_append
from ledger.services.chain import GENESIS_HASH, chain_verify, event_compute_hash, event_hash_fields
from ledger.services.chat import chat_claims_stale_post, chat_deliver
from ledger.services.checkpoints import (
    CHECKPOINT_FIELDS,
    CHECKPOINT_MAX_BYTES,
    SUMMARY_MAX_CHARS,
    checkpoint_save,
    checkpoint_validate,
    checkpoints_prune,
)
from ledger.services.email_decisions import approval_link_decide
from ledger.services.events import event_append
from ledger.services.executor import executor_run, executor_sweep
from ledger.services.goals import goal_create, goals_of
from ledger.services.leases import lease_release_undelivered, queued_left, run_lease
from ledger.services.notifications import (
    NotificationItem,
    approval_notify,
    notification_read,
    notifications_read_all,
    notifications_send,
    notifications_send_many,
    notifications_settle,
)
from ledger.services.oncall import (
    compensation_plan,
    oncall_refusal,
    retry_input,
    run_abandon,
    run_act,
    run_compensate,
    run_retry,
    runs_act_in_bulk,
)
from ledger.services.outbox import outbox_put, outbox_relay
from ledger.services.rollback import rollback_preview, run_rollback
from ledger.services.rollups import rollups_refresh
from ledger.services.runs import holding_runs, recovery_input_gather, run_trigger, runs_expire_leases, schedule_tick
from ledger.services.saved_views import saved_view_save
from ledger.services.slack import (
    slack_action_parse,
    slack_decide,
    slack_operator,
    slack_refusal_reply,
    slack_replay_guard,
    slack_signatures_prune,
    slack_user_of,
)
from ledger.services.traces import LAG as TRACES_LAG
from ledger.services.traces import MARK as TRACES_MARK
from ledger.services.traces import traces_export
from ledger.services.workflows import POLICY_FIELDS, workflow_create, workflow_update, workflow_validate
from ledger.services.writer import EXECUTOR, RunWriter, effect_key_default, input_fingerprint
from stateboard.moments import parse_moment

__all__ = [
    "alert_acknowledge", "alert_resolve", "alert_send", "alerts_evaluate", "deliveries_of", "silence_end",
    "silence_set", "CHECKPOINT_FIELDS", "CHECKPOINT_MAX_BYTES", "GENESIS_HASH", "SUMMARY_MAX_CHARS", "RunWriter",
    "approval_link_decide", "action_validate", "approval_amend",
    "approval_decide", "approval_request", "approvals_expire", "audit_record", "refusal_audit", "chain_verify",
    "chat_deliver", "slack_signatures_prune", "checkpoint_save", "checkpoint_validate", "checkpoints_prune",
    "compensation_plan", "effect_key_default", "event_append", "events_append", "event_compute_hash",
    "event_hash_fields", "goal_create", "goals_of", "input_fingerprint", "oncall_refusal", "retry_input",
    "rollback_preview", "run_rollback", "saved_view_save", "holding_runs", "parse_moment", "permit_find",
    "permit_spend", "recovery_input_gather", "run_abandon", "run_compensate", "approval_notify",
    "notification_read", "notifications_read_all", "notifications_send", "notifications_settle", "rollups_refresh", "traces_export",
    "queued_left", "TRACES_LAG", "TRACES_MARK",
    "run_act", "run_retry", "runs_act_in_bulk", "run_trigger", "runs_expire_leases", "executor_run",
    "executor_sweep", "run_lease", "outbox_put", "outbox_relay", "schedule_tick", "workflow_create",
    "workflow_update", "workflow_validate", "file_form", "file_parse", "outcome_lines", "workflows_apply",
    "lease_release_undelivered", "EXECUTOR", "NotificationItem", "POLICY_FIELDS", "chat_claims_stale_post",
    "notifications_send_many", "slack_action_parse", "slack_decide", "slack_operator", "slack_refusal_reply",
    "slack_replay_guard", "slack_user_of",
]
