"""The API's output shapes: one serializer per object for the schema, and the body functions the views,
the schema and the resume packet all render with (a run's and an event's body are built directly, not
field by field through DRF; ``tests/ledger/test_output_shapes.py`` holds them equal to DRF's output)."""

from datetime import timezone as dt_timezone

from django.utils import timezone
from django.utils.dateparse import parse_datetime
from rest_framework import serializers

from ledger.authorizers import sees_executors
from ledger.domain.usage import totals as usage_totals
from ledger.models import Approval, Effect, LedgerEvent, Run, Workflow


class WorkflowOutputSerializer(serializers.ModelSerializer):
    """``executors`` is shown to those who see it (``ledger.authorizers.sees_executors``)."""

    owner = serializers.SlugRelatedField(slug_field="username", read_only=True)
    schedule_intent = serializers.SerializerMethodField()

    class Meta:
        model = Workflow
        fields = ["slug", "title", "stages", "effect_stages", "approval_stages", "policy_version",
                  "max_retries", "lease_seconds", "checkpoint_ttl_seconds", "approval_ttl_seconds",
                  "schedule", "schedule_intent", "schedule_inputs", "executors", "knowledge_scope",
                  "agents", "alerts", "budget", "approval_rules", "owner", "created_at", "updated_at"]

    def get_schedule_intent(self, workflow) -> str:
        return workflow.schedule_intent or workflow.slug

    def to_representation(self, workflow):
        body = super().to_representation(workflow)
        request = self.context.get("request")
        if request is None or not sees_executors(request.user):
            body.pop("executors", None)
        return body


class EffectOutputSerializer(serializers.ModelSerializer):
    workflow = serializers.SlugRelatedField(slug_field="slug", read_only=True)

    class Meta:
        model = Effect
        fields = ["idempotency_key", "workflow", "intent", "input_fingerprint", "stage", "run", "status",
                  "system", "operation", "reference", "attempts", "claimed_seq", "last_seq",
                  "created_at", "updated_at"]


class VoteOutputSerializer(serializers.Serializer):
    """One approving vote (SPEC §17): who, when, with their reason."""

    by = serializers.CharField()
    at = serializers.DateTimeField()
    reason = serializers.CharField(allow_blank=True)

    def to_representation(self, vote):
        return {"by": vote["by"], "at": _drf_datetime(parse_datetime(vote["at"])), "reason": vote.get("reason", "")}


class ApprovalOutputSerializer(serializers.ModelSerializer):
    workflow = serializers.CharField(source="run.workflow.slug", read_only=True)
    votes = VoteOutputSerializer(many=True, read_only=True, help_text="the approving votes, oldest first")
    approvers = serializers.ListField(child=serializers.CharField(), read_only=True,
                                      help_text="who may decide: user:<name>, group:<name>, role:editor (role:oncall "
                                                "for an escalation), as the stage's rules were when requested")

    class Meta:
        model = Approval
        fields = ["id", "kind", "run", "workflow", "stage", "action", "action_digest", "policy_version",
                  "input_fingerprint", "status", "requested_by", "decided_by", "decided_role", "reason",
                  "created_at", "deadline", "decided_at", "consumed_at", "consumed_seq", "approvers", "quorum",
                  "votes", "amended_from"]


class RunOutputSerializer(serializers.ModelSerializer):
    workflow = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    lease = serializers.SerializerMethodField()
    usage = serializers.SerializerMethodField(help_text="SPEC §16: {input_tokens, output_tokens, cost_usd} totals "
                                                        "(cost_usd a decimal string)")

    class Meta:
        model = Run
        fields = ["id", "workflow", "intent", "trigger", "trigger_key", "inputs", "input_fingerprint",
                  "policy_version", "env_fingerprint", "state", "decision", "current_stage", "stage_states",
                  "triggered_by", "created_at", "updated_at", "decided_at", "ended_at", "lease", "event_count",
                  "staged", "goal_version", "attributes", "usage"]

    def get_lease(self, run) -> dict | None:
        return _lease_body(run)

    def get_usage(self, run) -> dict:
        return usage_totals(run.usage)

    def to_representation(self, run):
        return run_body(run)


class RunDetailOutputSerializer(RunOutputSerializer):
    effects = EffectOutputSerializer(many=True, read_only=True)
    approvals = ApprovalOutputSerializer(many=True, read_only=True)

    class Meta(RunOutputSerializer.Meta):
        fields = RunOutputSerializer.Meta.fields + ["effects", "approvals"]

    def to_representation(self, run):
        body = run_body(run)
        for name in ("effects", "approvals"):
            field = self.fields[name]
            body[name] = field.to_representation(field.get_attribute(run))
        return body


class EventOutputSerializer(serializers.ModelSerializer):
    class Meta:
        model = LedgerEvent
        fields = ["id", "run", "seq", "at", "stage", "kind", "actor", "input_fingerprint", "policy_version",
                  "env_fingerprint", "idempotency_key", "effect", "evidence", "reason_code", "data",
                  "client_event_id", "usage", "prev_hash", "hash"]

    def to_representation(self, event):
        return event_body(event)


def _drf_datetime(value):
    """A datetime as DRF renders it (ISO 8601, UTC as Z)."""
    if value is None:
        return None
    text = value.astimezone(dt_timezone.utc).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


_EVENT_FIELDS = tuple((name, name in ("run", "at")) for name in EventOutputSerializer.Meta.fields)


def event_body(event: LedgerEvent) -> dict:
    return {name: (event.run_id if name == "run" else _drf_datetime(event.at)) if special else getattr(event, name)
            for name, special in _EVENT_FIELDS}


def _lease_body(run: Run) -> dict | None:
    if not run.lease_owner or run.is_terminal:
        return None
    return {"owner": run.lease_owner, "id": str(run.lease_id) if run.lease_id else None,
            "expires_at": _drf_datetime(run.lease_expires_at)}


def run_body(run: Run, **extra) -> dict:
    queued = run.queued_until is not None and not run.is_terminal
    body = {
        "id": str(run.id), "workflow": run.workflow.slug, "intent": run.intent, "trigger": run.trigger,
        "trigger_key": run.trigger_key, "inputs": run.inputs, "input_fingerprint": run.input_fingerprint,
        "policy_version": run.policy_version, "env_fingerprint": run.env_fingerprint, "state": run.state,
        "decision": run.decision, "current_stage": run.current_stage, "stage_states": run.stage_states,
        "triggered_by": run.triggered_by, "created_at": _drf_datetime(run.created_at),
        "updated_at": _drf_datetime(run.updated_at), "decided_at": _drf_datetime(run.decided_at),
        "ended_at": _drf_datetime(run.ended_at), "lease": _lease_body(run), "event_count": run.event_count,
        "staged": run.staged, "goal_version": run.goal_version, "attributes": run.attributes,
        "usage": usage_totals(run.usage), "queued": queued,
    }
    if queued:
        body["queued_until"] = _drf_datetime(run.queued_until)
    if getattr(run, "attempt_count", None) is not None:  # listed with group=attempts
        body["attempts"] = run.attempt_count
    body.update(extra)
    return body


def checkpoint_body(checkpoint, now=None) -> dict:
    now = now or timezone.now()
    return {"id": checkpoint.id, "run": str(checkpoint.run_id), "workflow": checkpoint.workflow.slug,
            "intent": checkpoint.intent, "source": checkpoint.source, "created_at": checkpoint.created_at,
            "expires_at": checkpoint.expires_at, "expired": checkpoint.expires_at <= now,
            "input_fingerprint": checkpoint.input_fingerprint, "policy_version": checkpoint.policy_version,
            "env_fingerprint": checkpoint.env_fingerprint, "version_boundary": checkpoint.version_boundary,
            "saved_by": checkpoint.saved_by or ("system" if checkpoint.source == "server" else "unknown"),
            "payload": {**checkpoint.payload, "created_at": checkpoint.created_at,
                        "expires_at": checkpoint.expires_at}}

