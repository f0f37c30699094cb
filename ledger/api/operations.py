"""What each ledger API operation does, who may call it and the error codes it can answer (OpenAPI docs).

``ledger/api*.py`` decorate each method with ``operation(OPS["..."], request=..., responses=...)``
(``ledger.api.components.operation``); the codes below are the ones the services raise. Every
operation also answers 401 ``not_authenticated`` / ``authentication_failed`` and 403
``permission_denied``, and every body 400 ``malformed_json`` / ``nul_byte`` / ``too_deep`` and 413
``body_too_large``.
"""

from ledger.api.components import BATCH_MAX
from stateboard.openapi import Op, named

RUN_404 = {404: ["run_not_found", "not_found"]}
LIST_400 = {400: ["invalid_filter", "invalid_cursor"]}  # a filter that does not parse; a forged cursor

OPS = named({
    "workflows_list": Op(
        "List workflow definitions",
        "Every workflow, by slug. Any signed-in identity; `executors` is shown to owners only."),
    "workflows_create": Op(
        "Create a workflow",
        "A new workflow definition (stages, effect and approval stages, durations, schedule, executors, "
        "knowledge scope). Owners only. Every duration is an integer from 1 to 31,536,000 seconds.",
        {409: ["workflow_exists"], 422: ["validation_error", "invalid_schedule", "invalid_budget",
                                          "invalid_approval_rules"]}),
    "workflows_retrieve": Op(
        "Read a workflow",
        "One workflow definition. Any signed-in identity; `executors` is shown to owners only.",
        {404: ["workflow_not_found"]}),
    "workflows_partial_update": Op(
        "Change a workflow",
        "Changes the given fields (a `policy_version` change is a bump, audited with the optional `reason`). "
        "A change of stages, effect or approval stages, or of which stages have executors and their handler, "
        "needs a different `policy_version` (an executor's `config` does not). Owners only.",
        {404: ["workflow_not_found"], 409: ["policy_version_required"],
         422: ["validation_error", "invalid_schedule", "invalid_executors", "secret_env_not_allowed",
               "invalid_knowledge_scope", "invalid_alert", "invalid_budget", "invalid_approval_rules"]}),
    "workflows_apply_create": Op(
        "Apply workflow definitions",
        "Workflows as code (SPEC §12.2), the same apply as `manage.py apply`: makes the workflows match the whole "
        "definitions in `workflows` and answers per workflow `created`, `changed` (each field old → new), "
        "`unchanged`, `archived` or `restored`. All or nothing: one refused definition refuses them all (the "
        "first error's code and status, with `errors`: each `{workflow, field, code, detail}`). A change of "
        "stages, effect or approval stages, or of which stages have executors and their handler, needs a "
        "different `policy_version`. `dry_run` writes nothing; `prune` archives the workflows apply wrote last "
        "that are not named, `prune_all` every one not named; nothing is deleted. Each written workflow is "
        "audited with its changes, refusals too. Owners only.",
        {409: ["policy_version_required", "workflow_exists"],
         422: ["validation_error", "invalid_schedule", "invalid_executors", "secret_env_not_allowed",
               "invalid_knowledge_scope", "unknown_owner", "invalid_alert", "invalid_budget",
               "invalid_approval_rules"]}),
    "runs_list": Op(
        "List runs",
        "Runs newest first, cursor paginated, filtered by `workflow`, `state`, `intent`, `created_after`, "
        "`created_before`, `q` and `attr.<key>=<value>` (SPEC §15: the attribute equals the value, `2` the "
        "integer or the string, `true` the boolean or the string; a repeated key: each holds). `group=attempts` "
        "lists one row per attempt group (the runs of one intent and "
        "input fingerprint): its latest run, with `attempts`, the group's count. Any signed-in identity.", LIST_400),
    "runs_create": Op(
        "Trigger a run",
        "Triggers a run of a workflow and answers it with its recovery `decision` (201). A trigger whose "
        "`(workflow, trigger_key)` was seen with the same intent and inputs answers the existing run with "
        "`duplicate: true` (200), with its attributes as they are. `attributes` label a new run (SPEC §15). A "
        "run an agent triggers is leased to it at once. A W3C `traceparent` header starts the run's trace (SPEC §16; "
        "a malformed one is ignored). Agents, editors, owners and on-call (not viewers).",
        {403: ["agent_not_allowed"], 409: ["trigger_key_mismatch", "active_run_exists", "workflow_archived"],
         422: ["validation_error", "unknown_workflow", "invalid_trigger", "reserved_trigger_key",
               "invalid_attributes"]}),
    "runs_lease_create": Op(
        "Lease the earliest-queued run",
        "Hands the calling agent the queued run (of `workflows`, else any) that was queued earliest, leased "
        "to it for the workflow's `lease_seconds` (200), or 204 when none became available within "
        "`wait_seconds` (0 to 30). Agents only (SPEC §9.1). A field it does not know is 422 `unknown_field`.",
        {403: ["agent_not_allowed"], 422: ["validation_error", "unknown_workflow", "unknown_field"]}),
    "runs_retrieve": Op(
        "Read a run",
        "State, current stage, decision, lease, effects and approvals of one run. Any signed-in identity.",
        RUN_404),
    "runs_resume_packet_retrieve": Op(
        "Read the resume packet",
        "What an agent reads when a run starts instead of chat history: the decision, goal, stages, "
        "effects, pending intents, and facts and leads of the workflow's knowledge scope within "
        "`budget_tokens` (SPEC §9.2). Writes nothing. Any signed-in identity.",
        {400: ["invalid_budget"], **RUN_404, 422: ["budget_too_small"]}),
    "runs_events_list": Op(
        "List a run's ledger events",
        "The run's events in `seq` order, cursor paginated. Any signed-in identity.",
        {**RUN_404, 400: ["invalid_filter", "invalid_cursor"]}),
    "runs_events_create": Op(
        "Append events",
        "Appends one event (a JSON object: 201 with the event, incl. `seq`, `hash` and `idempotency_key` on "
        "effect stages) or a batch (a JSON array of up to "
        f"{BATCH_MAX} events, each with its `client_event_id`, appended in order in one transaction, all or "
        "nothing: 201 with the array). A repeated `client_event_id` with the same body answers the original "
        "event (200). A `started` on an effect stage claims the effect key and may only be a batch's last "
        "item. The lease holder (an agent) only; checks run in this order: a repeated `client_event_id`, "
        "the lease, the goal, the transition. A refused batch item answers its status and `code` with its "
        "`index`, and nothing is written.",
        {**RUN_404, 403: ["agent_not_allowed"],
         409: ["client_event_id_mismatch", "lease_held", "not_leased", "lease_expired", "illegal_transition",
               "effect_exists", "approval_required", "approval_void", "executor_stage", "goal_superseded"],
         422: ["validation_error", "unknown_kind", "kind_reserved", "unknown_stage", "data_too_large",
               "invalid_effect", "invalid_evidence", "effect_required", "evidence_required",
               "unknown_needs_effect_stage", "invalid_correction", "action_required", "batch_too_large",
               "claim_not_last", "effect_not_expected", "invalid_attributes", "invalid_usage"]}),
    "runs_verify_chain_retrieve": Op(
        "Verify a run's hash chain",
        "Recomputes the SHA-256 chain over the run's events: `ok`, the number of events and the first bad "
        "`seq` (null when intact). Any signed-in identity.", RUN_404),
    "runs_checkpoints_create": Op(
        "Save a checkpoint",
        "An agent's checkpoint of the run's intent: whitelisted fields only, at most 64 KiB, no transcripts, "
        "message lists, summary chains or tool schemas; a state-table summary is at most 280 characters. "
        "The body is the payload (or `{payload: {...}}`). The run's lease holder only, while the run is not "
        "finished; the answer names who saved it (`saved_by`).",
        {**RUN_404, 403: ["agent_not_allowed"], 409: ["illegal_transition", "lease_held", "not_leased"],
         422: ["validation_error", "checkpoint_too_large", "checkpoint_transcript_rejected",
               "checkpoint_field_not_allowed", "checkpoint_mismatch", "unknown_stage", "summary_too_long",
               "invalid_stage_status"]}),
    "runs_checkpoint_retrieve": Op(
        "Read the latest checkpoint",
        "The latest checkpoint of the run's (workflow, intent); past `expires_at` it says `expired: true`. "
        "Any signed-in identity.",
        {404: ["run_not_found", "not_found", "no_checkpoint"]}),
    "runs_approvals_create": Op(
        "Request an approval",
        "Asks for a human decision on a proposed `action`: `high_impact` for the next approval stage (the "
        "run waits in `awaiting_approval`) or `compensation` for a run in `compensate`. An identical pending "
        "request answers 200. Agents only.",
        {**RUN_404, 403: ["agent_not_allowed"], 409: ["approval_pending", "illegal_transition", "lease_held",
                                                      "not_leased", "staged_run"],
         422: ["validation_error", "invalid_kind", "unknown_stage", "not_an_approval_stage", "invalid_action"]}),
    "approvals_list": Op(
        "List approvals",
        "Approval requests newest first, filtered by `status`, `kind`, `run`. Any signed-in identity.", LIST_400),
    "approvals_approve_create": Op(
        "Approve a request",
        "Adds the caller's vote (with the optional `reason`) to a pending request; once `quorum` distinct "
        "approvers voted it is approved: a single-use permit for exactly its action. Editors among the request's "
        "`approvers` (on-call for escalations), never the requester nor an agent; a second vote by the same "
        "person, or approving an approved request again, changes nothing and answers 200.",
        {403: ["requester_cannot_decide", "not_an_approver"], 404: ["approval_not_found", "not_found"],
         409: ["approval_decided", "approval_expired"], 422: ["validation_error"]}),
    "approvals_reject_create": Op(
        "Reject a request",
        "Rejects a pending request, whatever votes it has; `reason` is required. Editors among the request's "
        "`approvers` (on-call for escalations), never the requester nor an agent.",
        {403: ["requester_cannot_decide", "not_an_approver"], 404: ["approval_not_found", "not_found"],
         409: ["approval_decided", "approval_expired"], 422: ["validation_error", "reason_required"]}),
    "approvals_amend_create": Op(
        "Amend a request's action",
        "Instead of deciding a pending request, an eligible approver amends its `action` (SPEC §17): the new "
        "action must satisfy the stage's `action_schema` (JSON Schema draft 2020-12; without one, any object), "
        "`reason` is required. The request is voided (status `expired`, the ledger's `approval_voided` with reason "
        "`amended`) and the new request answered (201), with `amended_from`, the same approvers and quorum, and "
        "the amender as its requester (so they cannot approve it). The agent starts the stage with the amended "
        "action to use its permit. Whoever may decide the request; an escalation has no action to amend.",
        {403: ["requester_cannot_decide", "not_an_approver", "not_amendable"], 404: ["approval_not_found", "not_found"],
         409: ["approval_decided", "approval_expired"], 422: ["validation_error", "reason_required", "invalid_action"]}),
    "runs_retry_create": Op(
        "Retry an escalated run",
        "Starts the retry budget afresh and answers the run with its new decision (it is then queued for an "
        "agent). On-call only.",
        {**RUN_404, 409: ["illegal_transition", "workflow_archived"], 422: ["validation_error"]}),
    "runs_compensate_create": Op(
        "Propose the compensation",
        "On an escalated run (or one in `compensate`): proposes the compensation of the intent's effects for "
        "an editor's approval (answered in `approval`), or escalates again when it cannot be planned. "
        "On-call only.",
        {**RUN_404, 409: ["illegal_transition", "active_run_exists"], 422: ["validation_error"]}),
    "runs_abandon_create": Op(
        "Abandon an escalated run",
        "Ends an escalated run as `abandoned`; `reason` is required. On-call only.",
        {**RUN_404, 409: ["illegal_transition"], 422: ["validation_error", "reason_required"]}),
    "effects_list": Op(
        "List effects",
        "External side effects and their status, newest first, filtered by `run`, `status`, "
        "`idempotency_key`, `workflow`. Any signed-in identity.", LIST_400),
    "metrics_retrieve": Op(
        "Read the metrics",
        "The metrics of SPEC §7 as JSON, for one `workflow` or all, since an ISO 8601 `since`. Any signed-in "
        "identity.", {422: ["validation_error"]}),
    "alerts_list": Op(
        "List alerts",
        "Alerts of the workflows' rules (SPEC §14), open first, then resolved, newest first, each with its history "
        "and deliveries; filtered by `state` (`open`, `firing`, `acknowledged`, `resolved`), `workflow`, "
        "`severity`. On-call, owners and editors.", {400: ["invalid_filter"]}),
    "alerts_retrieve": Op(
        "Read an alert", "One alert with its history and deliveries. On-call, owners and editors.",
        {404: ["alert_not_found"]}),
    "alerts_acknowledge_create": Op(
        "Acknowledge an alert", "`{note?}`: firing → acknowledged, recorded in its history. On-call only.",
        {404: ["alert_not_found"], 409: ["alert_resolved"]}),
    "alerts_resolve_create": Op(
        "Resolve an alert", "`{reason}` (required): the alert is resolved, recorded in its history. On-call only.",
        {404: ["alert_not_found"], 409: ["alert_resolved"], 422: ["validation_error"]}),
    "alerts_silence_create": Op(
        "Silence an alert rule",
        "`{minutes, reason}`: the rule's alerts are recorded but not delivered until then; when the silence ends "
        "its open alerts are delivered once. On-call or an owner.",
        {404: ["workflow_not_found", "alert_rule_not_found"], 422: ["validation_error"]}),
    "alerts_silence_destroy": Op(
        "End a silence", "Ends the rule's silence now; its open alerts are delivered once. On-call or an owner.",
        {404: ["workflow_not_found", "alert_rule_not_found", "silence_not_found"]}),
    "agents_list": Op(
        "List the fleet",
        "Every agent (SPEC §15), by name: `last_request_at` (accurate to a minute), `runs_held` (the ids of the "
        "runs it holds now), `leases_last_hour`, `refusals_last_hour` (its refused requests of the last hour, "
        "by code) and `token.state` (`active` or `revoked`). Owners and on-call."),
    "agents_revoke_create": Op(
        "Revoke an agent's token",
        "`{reason}` (required): every active token of the agent is revoked, each audited (`token_revoke`); the "
        "agent's next call is 401 `authentication_failed`. Answers the agent's row. Owners only.",
        {404: ["agent_not_found"], 409: ["token_revoked"], 422: ["validation_error"]}),
    "notifications_list": Op(
        "List my notifications",
        "The caller's notifications newest first (`unread=1`: unread ones only). Any signed-in identity.",
        {404: ["not_found"]}),
    "notifications_read_create": Op(
        "Mark a notification read",
        "Marks one of the caller's notifications read and answers it. Any signed-in identity, for their own.",
        {404: ["notification_not_found"]}),
    "workflows_goals_list": Op(
        "List an intent's goal versions",
        "The goal versions of the workflow's intents (`?intent=` narrows to one), newest first. Any signed-in "
        "identity.", {404: ["workflow_not_found"]}),
    "workflows_goals_create": Op(
        "Set a new goal version",
        "A new goal version for an intent (`change`: `amend` appends constraints and acceptance to the previous "
        "version's, `replace` takes the body as the whole goal). Holding runs of the intent between stages are "
        "decided again under it (`fresh` / `goal_changed`) and queued for an agent; a run that still owes the "
        "world an effect keeps its goal until then. Owners, editors and agents.",
        {403: ["agent_not_allowed"], 404: ["workflow_not_found"], 409: ["lease_held"],
         422: ["validation_error", "unknown_workflow"]}),
    "runs_rollback_create": Op(
        "Roll a finished run back to a stage",
        "On the intent's latest real run in completed, failed, escalated, abandoned or compensated: the effects "
        "at `to_stage` or later become `isolated` (or, with `compensate: true`, are compensated first through an "
        "approval); the run is decided again (`resume` / `rolled_back`) from `to_stage` with a fresh retry "
        "budget and queued for an agent. On-call and owners.",
        {**RUN_404, 409: ["run_active", "active_run_exists", "not_latest_run", "staged_run", "workflow_archived"],
         422: ["validation_error", "unknown_stage"]}),
})
