"""The knowledge store (L4): versioned claims with provenance.

``Claim`` rows are versions and are append-only in the database; the tombstone GC is the one
writer allowed to delete (it ignores the guard explicitly). The current value of a key is
found through ``ClaimHead`` (one mutable row per key, updated in the same transaction as the
version it points at), so retrieval reads current versions through an index and never scans
history. ``store_version`` is allocated from ``StoreCounter`` under a row lock held until
commit, so store versions are committed in order (a checkpoint's ``version_boundary`` means
"everything up to here was visible").
"""

from django.conf import settings
from django.db import models
from django.db.models import Q

from stateboard.db import append_only_triggers


class ClaimStatus(models.TextChoices):
    """Stored statuses. ``stale`` is computed at read time; ``rejected`` lives in GateDecision."""

    PENDING = "pending"
    ACTIVE = "active"
    INVALIDATED = "invalidated"
    REVOKED = "revoked"


TOMBSTONE_STATUSES = frozenset({ClaimStatus.INVALIDATED, ClaimStatus.REVOKED})
# Statuses that make a version the key's current (effective) value; a pending one never does.
EFFECTIVE_STATUSES = frozenset({ClaimStatus.ACTIVE, *TOMBSTONE_STATUSES})


class SourceType(models.TextChoices):
    OFFICIAL_DOC = "official-doc"
    PAPER = "paper"
    REPO = "repo"
    RUN_EVIDENCE = "run-evidence"


class Confidence(models.TextChoices):
    REPORTED = "reported"
    VERIFIED = "verified"
    ENGINEERING_INFERENCE = "engineering-inference"


class Sensitivity(models.TextChoices):
    PUBLIC = "public"
    INTERNAL = "internal"
    SENSITIVE = "sensitive"


class Claim(models.Model):
    """One version of a claim. Never updated; deleted only by the tombstone GC."""

    key = models.CharField(max_length=300)
    version = models.PositiveIntegerField()
    store_version = models.BigIntegerField(unique=True)
    status = models.CharField(max_length=20, choices=ClaimStatus.choices)
    statement = models.TextField(blank=True)
    source_refs = models.JSONField(default=list, blank=True)
    source_type = models.CharField(max_length=20, blank=True)
    scope_system = models.CharField(max_length=200, blank=True)
    scope_version = models.CharField(max_length=200, blank=True)
    scope_task = models.CharField(max_length=200, blank=True)
    confidence = models.CharField(max_length=30, blank=True)
    observed_at = models.DateTimeField(null=True, blank=True)
    refresh_after = models.DateTimeField(null=True, blank=True)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    sensitivity = models.CharField(max_length=20, default=Sensitivity.INTERNAL)
    retention_until = models.DateTimeField(null=True, blank=True)
    derived_from = models.JSONField(default=list, blank=True)
    # The verified ledger event a `verified` claim rests on (checked through ledger.selectors).
    ledger_event = models.BigIntegerField(null=True, blank=True)
    actor = models.CharField(max_length=200)
    reason = models.TextField(blank=True)
    # How this version came to be: {"action": "propose|refresh|accept|invalidate|revoke|restore", ...}
    provenance = models.JSONField(default=dict, blank=True)
    # For a pending version: what its acceptance needs (reason codes from the gate policy).
    pending_reasons = models.JSONField(default=list, blank=True)
    policy_version = models.CharField(max_length=50, blank=True)
    created_at = models.DateTimeField()
    # Set by the retention sweep when the statement and sources were erased (knowledge.ops.sweeps).
    erased_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["key", "-version"]
        constraints = [
            models.UniqueConstraint(fields=["key", "version"], name="claim_unique_key_version"),
            models.CheckConstraint(condition=Q(status__in=ClaimStatus.values), name="claim_status_valid"),
            models.CheckConstraint(condition=Q(version__gte=1), name="claim_version_positive"),
        ]
        indexes = [
            models.Index(fields=["key", "-version"], name="claim_key_version_desc"),
            models.Index(fields=["status", "refresh_after"], name="claim_status_refresh"),
            models.Index(fields=["retention_until"], name="claim_retention_due",
                         condition=Q(sensitivity="sensitive", erased_at__isnull=True, retention_until__isnull=False)),
        ]
        triggers = append_only_triggers()

    def __str__(self):
        return f"{self.key}@{self.version} ({self.status})"

    @property
    def is_tombstone(self) -> bool:
        return self.status in TOMBSTONE_STATUSES

    @property
    def scope(self) -> dict:
        return {"system": self.scope_system, "version": self.scope_version, "task": self.scope_task}


class ClaimHead(models.Model):
    """The current value of a key: mutable, one row per key, locked by every write of the key.

    ``current`` is the latest active or tombstone version (pending versions never move it).
    Scope, liveness, sensitivity and owner are copied from it so retrieval filters through the
    partial index without touching history. After the GC removed a key's history the row stays,
    with ``gc_*`` set, so the key is still known to have existed (reconcile never restores it)
    and version numbers are never reused.
    """

    key = models.CharField(max_length=300, unique=True)
    current = models.OneToOneField(
        Claim, null=True, blank=True, on_delete=models.PROTECT, related_name="head_of"
    )
    latest_version = models.PositiveIntegerField(default=0)
    live = models.BooleanField(default=False)
    system = models.CharField(max_length=200, blank=True)
    scope_version = models.CharField(max_length=200, blank=True)
    task = models.CharField(max_length=200, blank=True)
    sensitivity = models.CharField(max_length=20, blank=True)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    gc_status = models.CharField(max_length=20, blank=True)
    gc_store_version = models.BigIntegerField(null=True, blank=True)
    gc_at = models.DateTimeField(null=True, blank=True)
    # The live current version's refresh_after until the stale sweep has notified its owner
    # (then null): the sweep reads only claims still to notify, through a partial index.
    refresh_due_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField()

    class Meta:
        ordering = ["key"]
        indexes = [
            models.Index(fields=["system", "task", "key"], name="claimhead_live_scope",
                         condition=Q(live=True)),
            models.Index(fields=["task", "key"], name="claimhead_live_task", condition=Q(live=True)),
            models.Index(fields=["refresh_due_at"], name="claimhead_refresh_due",
                         condition=Q(refresh_due_at__isnull=False)),
        ]

    def __str__(self):
        return self.key

    @property
    def ever_live(self) -> bool:
        return self.current_id is not None or bool(self.gc_status)


class ClaimDerivation(models.Model):
    """``claim`` (a version) was derived from the claim with key ``source_key``."""

    claim = models.ForeignKey(Claim, on_delete=models.CASCADE, related_name="derivations")
    source_key = models.CharField(max_length=300)

    class Meta:
        indexes = [models.Index(fields=["source_key"], name="claimderivation_source")]
        triggers = append_only_triggers()


class ClaimReview(models.Model):
    """A flag: ``key`` must be reviewed because ``source_key`` (which it derives from) was tombstoned.

    Insert-only. A flag is open while it is newer than the key's current version: any later
    version of the key (a refresh, an accept, a tombstone) resolves it, with no update needed.
    """

    key = models.CharField(max_length=300)
    source_key = models.CharField(max_length=300)
    source_store_version = models.BigIntegerField()
    reason = models.CharField(max_length=50)
    actor = models.CharField(max_length=200)
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["-source_store_version"]
        indexes = [models.Index(fields=["key", "source_store_version"], name="claimreview_key_sv")]
        triggers = append_only_triggers()


class GateDecision(models.Model):
    """Every evaluation of the write gate, with its outcome and every reason (the rejection log)."""

    class Outcome(models.TextChoices):
        ACTIVE = "active"
        PENDING = "pending"
        REJECTED = "rejected"

    at = models.DateTimeField()
    action = models.CharField(max_length=20)  # propose | refresh | restore
    actor = models.CharField(max_length=200)
    key = models.CharField(max_length=300, blank=True)
    outcome = models.CharField(max_length=10, choices=Outcome.choices)
    reasons = models.JSONField(default=list, blank=True)
    pending_reasons = models.JSONField(default=list, blank=True)
    policy_version = models.CharField(max_length=50)
    # The refused proposal as sent (rejections only), so a reviewer can see what was refused.
    payload = models.JSONField(null=True, blank=True)
    claim_store_version = models.BigIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [
            models.Index(fields=["at"], name="gatedecision_at"),
            models.Index(fields=["key", "-at"], name="gatedecision_key_at"),
        ]
        triggers = append_only_triggers()


class ClaimCitation(models.Model):
    """A ledger event cited ``claim:<key>[@<version>]`` in its evidence; was it stale then?"""

    event_id = models.BigIntegerField()
    run_id = models.CharField(max_length=64, blank=True)
    actor = models.CharField(max_length=200)
    at = models.DateTimeField()
    uri = models.CharField(max_length=400)
    key = models.CharField(max_length=300)
    cited_version = models.PositiveIntegerField(null=True, blank=True)
    found = models.BooleanField(default=False)
    stale = models.BooleanField(default=False)
    tombstoned = models.BooleanField(default=False)
    superseded = models.BooleanField(default=False)

    class Meta:
        ordering = ["-at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["event_id", "uri"], name="claimcitation_unique_event_uri"),
        ]
        indexes = [models.Index(fields=["at"], name="claimcitation_at")]
        triggers = append_only_triggers()

    @property
    def not_a_fact(self) -> bool:
        """Cited as evidence although it was not a fact at that moment (stale, superseded, deleted)."""
        return self.stale or self.tombstoned or self.superseded


class StoreCounter(models.Model):
    """The store-wide version: a single row, incremented (and so locked) by every claim write."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    value = models.BigIntegerField(default=0)


class PacketServed(models.Model):
    """A resume packet as it was served (SPEC §9.2): for which run, to whom, when, and which claims of
    the workflow's scope it held as facts and leads or left out, and why (``claims``). Insert-only;
    reading the same packet again (same reader, same claims) adds no row."""

    run_id = models.CharField(max_length=64)
    served_to = models.CharField(max_length=200)
    at = models.DateTimeField()
    budget_tokens = models.PositiveIntegerField()
    approx_tokens = models.PositiveIntegerField()
    omitted_facts = models.PositiveIntegerField(default=0)
    omitted_leads = models.PositiveIntegerField(default=0)
    # sha256 of the served claims (key, version, use, reason): what makes a reading "the same packet".
    digest = models.CharField(max_length=64)

    class Meta:
        ordering = ["-at", "-id"]
        constraints = [models.UniqueConstraint(fields=["run_id", "served_to", "digest"],
                                               name="packetserved_unique_reading")]
        indexes = [models.Index(fields=["run_id", "-at"], name="packetserved_run_at")]
        triggers = append_only_triggers()


class PacketClaim(models.Model):
    """One claim of a served packet: a fact, a lead (stale, or flagged for review) or left out (over the
    token budget, revoked, invalidated, or pending review)."""

    class Use(models.TextChoices):
        FACT = "fact"
        LEAD = "lead"
        LEFT_OUT = "left_out"

    packet = models.ForeignKey(PacketServed, on_delete=models.PROTECT, related_name="claims")
    key = models.CharField(max_length=300)
    version = models.PositiveIntegerField(null=True, blank=True)
    use = models.CharField(max_length=10, choices=Use.choices)
    reason = models.CharField(max_length=30, blank=True)

    class Meta:
        ordering = ["packet_id", "use", "key"]
        indexes = [models.Index(fields=["key", "packet"], name="packetclaim_key")]
        triggers = append_only_triggers()
