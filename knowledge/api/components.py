"""OpenAPI components and operation docs of the claims API (SPEC §1, §4), for the schema only.

The write gate (``knowledge/domain/gate.py`` and ``policy/write_gate.yaml``) judges every proposal; these
serializers only describe the shapes, never validate. ``ClaimOutputTyped`` types the JSON fields
of ``knowledge.api.ClaimOutput`` without changing it.
"""

from rest_framework import serializers

from knowledge.models import Confidence, Sensitivity, SourceType
from stateboard.openapi import Op, TypedOutputFields, named


class ClaimScopeSerializer(serializers.Serializer):
    system = serializers.CharField(max_length=200)
    version = serializers.CharField(max_length=200, required=False, allow_blank=True)
    task = serializers.CharField(max_length=200, required=False, allow_blank=True)


class ClaimProposalSerializer(serializers.Serializer):
    """A proposal to the write gate: every reason it fails is answered at once (422 `write_gate_rejected`)."""

    key = serializers.CharField(max_length=300, help_text="stable subject id; dots, slashes and colons are fine")
    statement = serializers.CharField(max_length=4000)
    source_refs = serializers.ListField(child=serializers.CharField(max_length=2000), min_length=1, max_length=50,
                                        help_text="URIs; the allowed schemes depend on `source_type`")
    source_type = serializers.ChoiceField(choices=SourceType.choices)
    scope = ClaimScopeSerializer()
    confidence = serializers.ChoiceField(choices=Confidence.choices,
                                         help_text="`verified` needs `ledger_event`; `engineering-inference` is "
                                                   "always reviewed")
    observed_at = serializers.DateTimeField()
    refresh_after = serializers.DateTimeField(help_text="after it the claim is served only as a lead")
    owner = serializers.CharField(required=False, allow_null=True, help_text="a username")
    sensitivity = serializers.ChoiceField(choices=Sensitivity.choices, required=False,
                                          help_text="default `internal`; `sensitive` needs `retention_until`")
    retention_until = serializers.DateTimeField(required=False, allow_null=True)
    derived_from = serializers.ListField(child=serializers.CharField(), required=False, max_length=50,
                                         help_text="keys of the claims it rests on")
    ledger_event = serializers.IntegerField(required=False, allow_null=True,
                                            help_text="for `verified`: the id of the verified ledger event")


class ClaimRefreshSerializer(serializers.Serializer):
    observed_at = serializers.DateTimeField(required=False)
    refresh_after = serializers.DateTimeField(required=False)
    source_refs = serializers.ListField(child=serializers.CharField(max_length=2000), required=False)
    statement = serializers.CharField(required=False, max_length=4000)
    ledger_event = serializers.IntegerField(required=False, allow_null=True)
    retention_until = serializers.DateTimeField(required=False, allow_null=True)
    derived_from = serializers.ListField(child=serializers.CharField(), required=False)
    reason = serializers.CharField(required=False, allow_blank=True)


class ReconcileEntrySerializer(ClaimProposalSerializer):
    """A claim as a checkpoint's snapshot holds it: the key, the store version it was read at, and its fields."""

    store_version = serializers.IntegerField(min_value=1)


class ReconcileSerializer(serializers.Serializer):
    entries = ReconcileEntrySerializer(many=True)
    checkpoint = serializers.JSONField(required=False, allow_null=True, help_text="names the snapshot's checkpoint")
    version_boundary = serializers.IntegerField(required=False, allow_null=True, min_value=0)


class ReconcileRowSerializer(serializers.Serializer):
    key = serializers.CharField()
    snapshot_store_version = serializers.IntegerField()
    outcome = serializers.ChoiceField(choices=["restored", "kept_live", "kept_tombstone", "rejected"])
    reasons = serializers.ListField(child=serializers.JSONField(), required=False, help_text="`rejected`")


class ReconcileCountsSerializer(serializers.Serializer):
    restored = serializers.IntegerField()
    kept_live = serializers.IntegerField()
    kept_tombstone = serializers.IntegerField()
    rejected = serializers.IntegerField()


class ReconcileResultSerializer(serializers.Serializer):
    results = ReconcileRowSerializer(many=True)
    counts = ReconcileCountsSerializer()
    store_version = serializers.IntegerField()
    checkpoint = serializers.JSONField(allow_null=True)


class ClaimDetailSerializer(serializers.Serializer):
    key = serializers.CharField()
    current = serializers.DictField(allow_null=True, help_text="the current version (a ClaimOutput), or null")
    history = serializers.ListField(child=serializers.DictField(), help_text="every version (ClaimOutput), newest first")
    pending = serializers.ListField(child=serializers.DictField())
    reviews = serializers.ListField(child=serializers.DictField())
    rejections = serializers.ListField(child=serializers.DictField())
    removed = serializers.DictField(allow_null=True, help_text="set once the tombstone GC removed the history")


class ClaimOutputTyped(TypedOutputFields):
    target_class = "knowledge.api.claims.ClaimOutput"
    typed = {"scope": (ClaimScopeSerializer, "one"),
             "source_refs": ({"type": "array", "items": {"type": "string"}}, "one"),
             "derived_from": ({"type": "array", "items": {"type": "string"}}, "one"),
             "pending_reasons": ({"type": "array", "items": {"type": "string"}}, "one"),
             "provenance": ({"type": "object", "additionalProperties": {}}, "one"),
             "retention_until": ({"type": "string", "format": "date-time", "nullable": True}, "one"),
             "ledger_event": ({"type": "integer", "nullable": True}, "one")}


CLAIM_404 = {404: ["claim_not_found", "not_found"]}

OPS = named({
    "claims_list": Op(
        "List current claims",
        "Current claims by `system`, `version`, `task`, `key`, `use_as`: active ones as `use_as: \"fact\"`, stale "
        "ones (past `refresh_after`) or flagged ones as `\"lead\"`; tombstones never; sensitive ones only for "
        "who may read them. Paginated by `cursor` and `limit`. Any signed-in identity.",
        {400: ["validation_error"]}),
    "claims_create": Op(
        "Propose a claim",
        "Proposes a claim through the write gate: 201 with the new version, `active` or `pending` (awaiting "
        "review); a refused proposal is 422 `write_gate_rejected` with every reason in `reasons`, and nothing "
        "but the rejection record is written. Agents and owners.",
        {422: ["write_gate_rejected"]}),
    "claims_retrieve": Op(
        "Read a claim and its history",
        "A key's current version and its full history, pending versions, review flags and gate rejections. "
        "Any signed-in identity.", CLAIM_404),
    "claims_refresh_create": Op(
        "Refresh a claim",
        "A new version of a live claim with new evidence and dates, through the write gate. Owners and "
        "editors (people, never agents).",
        {**CLAIM_404, 409: ["claim_not_live"], 422: ["write_gate_rejected"]}),
    "claims_accept_create": Op(
        "Accept a pending version",
        "The pending version (the latest, or `version`) becomes active as a new version. Owners and editors; "
        "an inference: owner or editor, a sensitive claim: owner, a revoked key: the claim's owner (SPEC §4).",
        {400: ["validation_error"], 403: ["not_allowed_to_accept"], 404: ["claim_not_found", "version_not_found"],
         409: ["not_pending", "nothing_pending", "claim_erased", "pending_superseded"]}),
    "claims_invalidate_create": Op(
        "Invalidate a claim",
        "Tombstones the claim (a new version, never a delete); `reason` is required; claims derived from it "
        "are flagged for review. Owners and editors.",
        {**CLAIM_404, 409: ["claim_removed"], 422: ["reason_required"]}),
    "claims_revoke_create": Op(
        "Revoke a claim",
        "Tombstones the claim; `reason` is required. The claim's owner only (any owner-role person when it "
        "has none); never an agent.",
        {403: ["not_claim_owner"], **CLAIM_404, 409: ["claim_removed"], 422: ["reason_required"]}),
    "knowledge_reconcile_create": Op(
        "Reconcile a memory snapshot",
        "Merges a checkpoint's claim snapshot into the live store: a live value wins (`kept_live`), a "
        "tombstone wins (`kept_tombstone`), a key never live is restored through the write gate (`restored` "
        "or `rejected`); answers each key's outcome and the counts. Agents and owners.",
        {422: ["entries_invalid", "version_boundary_invalid"]}),
})
