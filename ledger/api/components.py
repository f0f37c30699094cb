"""OpenAPI components of the ledger API's JSON shapes (SPEC §1, API.md), for the schema only.

These serializers are never used to validate or render: the services own every rule (one home per
rule) and the API renders plain dicts. They give ``/api/v1/schema/`` typed bodies, so client authors
and schemathesis see the real shapes. The generic helpers (``Op``, ``named``, ``operation()``,
``page_of``, ``one_or_many``, the ``Error`` component) live in ``stateboard.openapi`` and are
re-exported here for the resource modules.
"""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, PolymorphicProxySerializer
from rest_framework import serializers

from ledger import services
from ledger.domain.kinds import AGENT_KINDS
from ledger.models import Approval, Checkpoint

# What an agent may post (ledger.domain.kinds: stage outcomes, corrections, and the approved compensation).
AGENT_EVENT_KINDS = sorted(AGENT_KINDS)
DECISION_OUTCOMES = ["fresh", "resume", "verify_only", "noop", "escalated"]
BATCH_MAX = 100


# ---------------------------------------------------------------- events

class EffectSerializer(serializers.Serializer):
    """What an effect stage changed in the world (SPEC §1)."""

    system = serializers.CharField(max_length=200, required=False, help_text="e.g. `github`, `k8s`")
    operation = serializers.CharField(max_length=200, required=False, help_text="e.g. `push`, `deploy`")
    reference = serializers.CharField(max_length=1000, required=False,
                                      help_text="commit SHA, deployment id, URL")


class EvidenceSerializer(serializers.Serializer):
    """One piece of evidence; `verified` needs one with `uri` and `observed_at`."""

    uri = serializers.CharField(help_text="where it was observed (`claim:<key>@<version>` cites a claim)")
    observed_at = serializers.DateTimeField(help_text="ISO 8601 with a timezone")
    digest = serializers.CharField(required=False)
    excerpt = serializers.CharField(required=False)


class ActionSerializer(serializers.Serializer):
    """A proposed high-impact or compensating action; an approval is a permit for exactly this object."""

    system = serializers.CharField()
    operation = serializers.CharField()
    target = serializers.CharField()
    summary = serializers.CharField()
    params = serializers.DictField(required=False, help_text="executor stages only (`proposed`)")


class UsageSerializer(serializers.Serializer):
    """What the event spent (SPEC §16); anything else is 422 `invalid_usage`."""

    input_tokens = serializers.IntegerField(min_value=0, required=False, help_text="a JSON integer")
    output_tokens = serializers.IntegerField(min_value=0, required=False, help_text="a JSON integer")
    cost_usd = serializers.CharField(required=False, help_text="a decimal string (or number), at most 6 places")
    model = serializers.CharField(max_length=100, required=False)


class EventInputSerializer(serializers.Serializer):
    """One event an agent posts (API.md, Event semantics)."""

    client_event_id = serializers.CharField(max_length=200, required=False,
                                            help_text="send one: a retry with the same body answers the original "
                                                      "event (200); required in a batch")
    stage = serializers.CharField(max_length=100, allow_blank=True,
                                  help_text="a stage of the run's workflow (blank only for `corrected`)")
    kind = serializers.ChoiceField(choices=AGENT_EVENT_KINDS)
    effect = EffectSerializer(required=False, help_text="on an effect stage's `succeeded`")
    evidence = EvidenceSerializer(many=True, required=False, help_text="`verified` needs at least one")
    reason_code = serializers.CharField(max_length=100, required=False,
                                        help_text="e.g. `effect_absent` on a `failed` in verify")
    data = serializers.DictField(required=False, help_text="small facts (at most 16 KiB); `corrected`: {corrects: seq}")
    idempotency_key = serializers.CharField(max_length=200, required=False,
                                            help_text="an effect stage's key, when it is not the default")
    action = ActionSerializer(required=False,
                              help_text="the approved action (`started` on an approval stage, `compensated`, "
                                        "`proposed` on an executor stage)")
    lease_id = serializers.UUIDField(required=False, help_text="fences two processes of one agent")
    usage = UsageSerializer(required=False, help_text="tokens and cost this event spent (SPEC §16)")


EVENT_INPUT_OR_BATCH = PolymorphicProxySerializer(
    component_name="EventInputOrBatch", resource_type_field_name=None, many=False,
    serializers=[EventInputSerializer, EventInputSerializer(many=True)])


METRICS = OpenApiResponse(response=OpenApiTypes.OBJECT, description="the metrics of SPEC §7, per workflow")


class ApprovalRequestSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=[Approval.Kind.HIGH_IMPACT, Approval.Kind.COMPENSATION])
    stage = serializers.CharField(max_length=100)
    action = ActionSerializer()


# ---------------------------------------------------------------- checkpoints

class StateTableEntrySerializer(serializers.Serializer):
    status = serializers.CharField(required=False, help_text="e.g. `succeeded`, `verified`")
    summary = serializers.CharField(required=False, allow_blank=True, max_length=services.SUMMARY_MAX_CHARS)
    pointer = serializers.CharField(required=False, allow_blank=True, help_text="where the artifact is")
    digest = serializers.CharField(required=False, allow_blank=True)


class AssertionSerializer(serializers.Serializer):
    stage = serializers.CharField(help_text="a stage of the workflow")
    pointer = serializers.CharField(required=False, allow_blank=True)
    digest = serializers.CharField(required=False, allow_blank=True)


class CheckpointPayloadSerializer(serializers.Serializer):
    """The whitelist (SPEC §1); any other field, a transcript or more than 64 KiB is refused."""

    stage = serializers.CharField(required=False, allow_blank=True)
    resume_after = serializers.CharField(required=False, allow_null=True, help_text="where to resume")
    retry_count = serializers.IntegerField(required=False, min_value=0)
    max_retries = serializers.IntegerField(required=False, min_value=0)
    allowed_next_stages = serializers.ListField(child=serializers.CharField(max_length=200), required=False)
    observed_effects = serializers.ListField(child=serializers.CharField(max_length=200), required=False,
                                             help_text="effect keys")
    state_table = serializers.DictField(child=StateTableEntrySerializer(), required=False,
                                        help_text="{stage: {status, summary, pointer}}")
    version_boundary = serializers.IntegerField(required=False, allow_null=True, min_value=0,
                                                help_text="the knowledge store_version seen")
    assertions = AssertionSerializer(many=True, required=False, help_text="done-criteria")
    pending_intents = serializers.ListField(child=serializers.CharField(), required=False)
    input_fingerprint = serializers.CharField(required=False, help_text="if given, must be the run's")
    policy_version = serializers.CharField(required=False, help_text="if given, must be the run's")
    env_fingerprint = serializers.CharField(required=False, allow_blank=True, help_text="if given, must be the run's")
    created_at = serializers.DateTimeField(required=False, help_text="ignored: the server's clock")
    expires_at = serializers.DateTimeField(required=False, allow_null=True,
                                           help_text="within the workflow's checkpoint TTL")


class CheckpointSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    run = serializers.UUIDField()
    workflow = serializers.CharField()
    intent = serializers.CharField()
    source = serializers.ChoiceField(choices=Checkpoint.Source.choices)
    created_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField()
    expired = serializers.BooleanField()
    input_fingerprint = serializers.CharField()
    policy_version = serializers.CharField()
    env_fingerprint = serializers.CharField()
    version_boundary = serializers.IntegerField(allow_null=True)
    payload = CheckpointPayloadSerializer()


# ---------------------------------------------------------------- runs

class DecisionSerializer(serializers.Serializer):
    """The recovery decision (SPEC §3): what the agent does with this run."""

    outcome = serializers.ChoiceField(choices=DECISION_OUTCOMES)
    reason_code = serializers.CharField(help_text="e.g. `no_checkpoint`, `effect_unverified`")
    resume_from = serializers.CharField(allow_null=True, help_text="the first stage to run")
    verify_effects = serializers.ListField(child=serializers.CharField(), help_text="effect keys to verify first")
    prior_run = serializers.UUIDField(allow_null=True)
    checkpoint = serializers.IntegerField(allow_null=True)
    failed_assertions = serializers.ListField(child=serializers.CharField(), required=False)
    reset_stages = serializers.ListField(child=serializers.CharField(), required=False)
    retry_count = serializers.IntegerField(required=False)
    max_retries = serializers.IntegerField(required=False)


class LeaseSerializer(serializers.Serializer):
    owner = serializers.CharField(help_text="`agent:<name>`, or `system` for the executor")
    id = serializers.UUIDField(allow_null=True, help_text="send it as the events' `lease_id`")
    expires_at = serializers.DateTimeField(allow_null=True)


class ChainReportSerializer(serializers.Serializer):
    ok = serializers.BooleanField()
    events = serializers.IntegerField()
    first_bad_seq = serializers.IntegerField(allow_null=True)


# ---------------------------------------------------------------- the resume packet (SPEC §9.2)

class PacketRunSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    workflow = serializers.CharField()
    intent = serializers.CharField()
    state = serializers.CharField()
    staged = serializers.BooleanField()
    goal_version = serializers.IntegerField(allow_null=True)


class PacketGoalSerializer(serializers.Serializer):
    inputs = serializers.DictField()
    objective = serializers.CharField(required=False)
    constraints = serializers.JSONField(required=False)
    acceptance = serializers.JSONField(required=False)


class PacketStageSerializer(serializers.Serializer):
    stage = serializers.CharField()
    status = serializers.CharField(help_text="`pending` until the stage has an event")
    pointer = serializers.CharField(required=False)


class PacketEffectSerializer(serializers.Serializer):
    stage = serializers.CharField()
    idempotency_key = serializers.CharField()
    system = serializers.CharField()
    operation = serializers.CharField()
    reference = serializers.CharField()
    verified_at = serializers.DateTimeField(allow_null=True)


class PacketFactSerializer(serializers.Serializer):
    key = serializers.CharField()
    statement = serializers.CharField()
    source_refs = serializers.ListField(child=serializers.CharField())
    observed_at = serializers.DateTimeField()
    refresh_after = serializers.DateTimeField()
    version = serializers.IntegerField()


class PacketLeadSerializer(serializers.Serializer):
    key = serializers.CharField()
    statement = serializers.CharField()
    refresh_after = serializers.DateTimeField()


class PacketOmittedSerializer(serializers.Serializer):
    facts = serializers.IntegerField()
    leads = serializers.IntegerField()


class ResumePacketSerializer(serializers.Serializer):
    run = PacketRunSerializer()
    decision = DecisionSerializer()
    goal = PacketGoalSerializer()
    stages = PacketStageSerializer(many=True)
    verified_effects = PacketEffectSerializer(many=True)
    effects_to_verify = PacketEffectSerializer(many=True)
    pending_intents = serializers.ListField(child=serializers.JSONField())
    facts = PacketFactSerializer(many=True, help_text="active claims of the workflow's knowledge scope")
    leads = PacketLeadSerializer(many=True, help_text="stale claims: leads to re-check, never facts")
    rules = serializers.ListField(child=serializers.CharField())
    approx_tokens = serializers.IntegerField(help_text="ceil(UTF-8 bytes of the compact JSON / 4)")
    omitted = PacketOmittedSerializer()

