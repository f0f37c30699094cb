"""The ledger's core models (SPEC §1): agents and tokens, workflows, runs, the append-only events,
effects, checkpoints, approvals and the audit trail. Import them from ``ledger.models``."""

import uuid

import pgtrigger
from django.conf import settings
from django.db import models
from django.db.models import JSONField, Q, Value

from ledger.domain.approval_rules import QUORUM_MAX, default_approvers
from ledger.domain.kinds import EventKind
from ledger.domain.machine import HOLDING_STATES, ONCALL_ACTIONS, ONCALL_STATES, TERMINAL_STATES, RunState
from stateboard.db import NoTruncate
from stateboard.db import append_only_triggers as shared_append_only_triggers

DEFAULT_STAGES = ["discovery", "assessment", "draft", "build", "commit", "push", "deploy", "verify"]
DEFAULT_EFFECT_STAGES = ["commit", "push", "deploy"]
DEFAULT_APPROVAL_STAGES = ["deploy"]


def default_stages():
    return list(DEFAULT_STAGES)


def default_effect_stages():
    return list(DEFAULT_EFFECT_STAGES)


def default_approval_stages():
    return list(DEFAULT_APPROVAL_STAGES)


def append_only_triggers():
    return shared_append_only_triggers(what="the ledger is append-only")


def kept_triggers():
    """A per-intent table whose rows change one by one, never all at once."""
    return [NoTruncate(what="the ledger is never truncated")]


class RunRowsQuerySet(models.QuerySet):
    def of_run(self, run):
        """The rows of ``run``, by its id and its intent: on PostgreSQL, one partition read (SPEC §13)."""
        return self.filter(run_id=run.id, intent=run.intent)


class Agent(models.Model):
    """A machine identity; its user belongs to the ``agent`` group."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="agent")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="owned_agents"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self):
        return self.user.get_username()


class ApiToken(models.Model):
    """An API token, stored as its SHA-256 only; revoking keeps the row for the audit."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    key_hash = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=8)
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # When the token last authenticated a request, accurate to ``ledger.auth.LAST_USED_PRECISION`` (the request
    # path writes it only when older than that): the fleet's "last request" (SPEC §15).
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name, verbose_name_plural = "API token", "API tokens"

    def __str__(self):
        return f"{self.prefix}… ({self.user})"


class Workflow(models.Model):
    slug = models.SlugField(max_length=100, unique=True)
    title = models.CharField(max_length=200, blank=True)
    stages = models.JSONField(default=default_stages)
    effect_stages = models.JSONField(default=default_effect_stages, blank=True)
    approval_stages = models.JSONField(default=default_approval_stages, blank=True)
    policy_version = models.CharField(max_length=100, default="1")
    checkpoint_ttl_seconds = models.PositiveIntegerField(default=86400)
    max_retries = models.PositiveIntegerField(default=3)
    lease_seconds = models.PositiveIntegerField(default=600)
    approval_ttl_seconds = models.PositiveIntegerField(default=86400)
    schedule = models.CharField(max_length=100, blank=True, help_text="cron: minute hour day month weekday")
    schedule_intent = models.CharField(max_length=500, blank=True, default="", db_default="",
                                       help_text="intent of scheduled runs (default: slug)")
    schedule_inputs = models.JSONField(default=dict, blank=True, db_default=Value({}, JSONField()))
    # {stage: {"handler": name, "config": {...}}}: effect stages Stateboard performs itself (SPEC §5.2).
    executors = models.JSONField(default=dict, blank=True, db_default=Value({}, JSONField()))
    knowledge_scope = models.JSONField(default=dict, blank=True, db_default=Value({}, JSONField()))
    # The agents allowed to serve it (names; empty: every agent), SPEC §11.1.
    agents = models.JSONField(default=list, blank=True, db_default=Value([], JSONField()))
    # Alert rules (SPEC §14): [{name, kind, severity, notify, attributes?, ...}]; no policy bump needed.
    alerts = models.JSONField(default=list, blank=True, db_default=Value([], JSONField()))
    # SPEC §16: {tokens_per_run?, cost_usd_per_run?, cost_usd_per_day?} (``domain.usage.budget_checked``); no bump.
    budget = models.JSONField(default=dict, blank=True, db_default=Value({}, JSONField()))
    # SPEC §17: {stage: {approvers, quorum, action_schema?}} (``domain.approval_rules``); no bump.
    approval_rules = models.JSONField(default=dict, blank=True, db_default=Value({}, JSONField()))
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="workflows"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    # SPEC §12.2: an archived workflow takes no triggers, retries, rollbacks or ticks; a file naming it restores it.
    archived_at = models.DateTimeField(null=True, blank=True)
    # Whether `apply` wrote it last (`apply --prune` archives only these); the API's writes clear it.
    written_by_apply = models.BooleanField(default=False, db_default=False)

    class Meta:
        ordering = ["slug"]

    def __str__(self):
        return self.slug


class Trigger(models.TextChoices):
    SCHEDULE = "schedule"
    EVENT = "event"
    HUMAN = "human"
    API = "api"


class Run(models.Model):
    # On PostgreSQL this table and the event, effect and checkpoint tables are partitioned by intent
    # (migration 0021, docs/scaling.md): a new unique key on them must hold the intent.
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # No index of its own: run_intent_state, run_intent_fp_state and run_unique_trigger_key all lead with it
    # (a lone workflow index drew the planner, before statistics existed, away from the intent's own).
    workflow = models.ForeignKey(Workflow, on_delete=models.PROTECT, related_name="runs", db_index=False)
    intent = models.CharField(max_length=500)
    trigger = models.CharField(max_length=20, choices=Trigger.choices, default=Trigger.API)
    trigger_key = models.CharField(max_length=500)
    inputs = models.JSONField(default=dict)
    input_fingerprint = models.CharField(max_length=64)
    policy_version = models.CharField(max_length=100)
    env_fingerprint = models.CharField(max_length=500, blank=True)
    state = models.CharField(max_length=20, choices=RunState.choices, default=RunState.CAPTURED)
    decision = models.JSONField(default=dict, blank=True)
    current_stage = models.CharField(max_length=100, blank=True)
    # Projection of the ledger: {stage: {"status", "seq", "hash", "run"}} for this run's view of the work.
    stage_states = models.JSONField(default=dict, blank=True)
    triggered_by = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    retried_at = models.DateTimeField(null=True, blank=True)
    lease_owner = models.CharField(max_length=200, blank=True)  # the holder's name when it took the lease
    # The holder's identity (an agent's user): what a lease is checked against (SPEC §11.1).
    lease_holder = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                     db_index=False, db_constraint=False, related_name="+")
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    lease_id = models.UUIDField(null=True, blank=True)
    # Queued for an agent (SPEC §9.1): set while no agent holds the run, cleared by the lease.
    queued_at = models.DateTimeField(null=True, blank=True)
    queued_until = models.DateTimeField(null=True, blank=True)
    # The reason code of the move to a terminal state (``not_leased`` runs never count as retries).
    ended_reason = models.CharField(max_length=100, blank=True, default="", db_default="")
    # While the executor holds an effect stage (SPEC §5.2): {stage, action, agent, lease_id, attempts, ...}.
    executor_state = models.JSONField(default=dict, blank=True, db_default=Value({}, JSONField()))
    # SPEC §10: a staged (dry) run performs nothing; goal_version is the intent's goal the run works
    # under; goal_outdated marks a run that still owes the world something when a newer goal arrived
    # (it is moved to that goal once it owes nothing).
    staged = models.BooleanField(default=False, db_default=False)
    goal_version = models.PositiveIntegerField(null=True, blank=True)
    goal_outdated = models.BooleanField(default=False, db_default=False)
    event_count = models.PositiveIntegerField(default=0)
    last_hash = models.CharField(max_length=64, blank=True)
    # SPEC §7: from the trigger request's arrival to the committed `decided` event (API triggers only).
    decision_latency_ms = models.FloatField(null=True, blank=True)
    # SPEC §15: the trigger's and the lease holder's labels ({key: string, integer, boolean or UTC time}), the
    # ledger's ``attributes_set`` events merged; no fingerprint or decision reads them. On PostgreSQL a GIN
    # index (jsonb_path_ops, migration 0025) serves the ``attr.<key>=`` filter's containment.
    attributes = models.JSONField(default=dict, blank=True, db_default=Value({}, JSONField()))
    # SPEC §16: the W3C ``traceparent`` of the trigger request, when it sent a valid one (the run's trace
    # continues the caller's); written by the run's INSERT, read only by the trace export (ledger/traces/).
    traceparent = models.CharField(max_length=55, blank=True, default="", db_default="")
    # SPEC §16: the totals of its events' usage, {input_tokens, output_tokens, cost_usd (a decimal string)}.
    usage = models.JSONField(default=dict, blank=True, db_default=Value({}, JSONField()))

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["workflow", "trigger_key"], name="run_unique_trigger_key"),
            models.UniqueConstraint(
                fields=["workflow", "intent"],
                condition=Q(state__in=HOLDING_STATES, staged=False),
                name="run_one_active_per_intent",
            ),
            models.CheckConstraint(condition=Q(state__in=RunState.values), name="run_state_valid"),
        ]
        indexes = [
            models.Index(fields=["workflow", "intent", "input_fingerprint", "state"], name="run_intent_fp_state"),
            models.Index(fields=["workflow", "intent", "state"], name="run_intent_state"),
            # A trigger counts the intent's failed (and retried) runs of its fingerprint: only those are
            # indexed, so the read does not grow with the intent's finished runs.
            models.Index(fields=["workflow", "intent", "input_fingerprint"], name="run_failed_or_retried",
                         condition=Q(state="failed") | Q(retried_at__isnull=False)),
            # The lease sweep reads the few holding runs; lease_expires_at is not indexed, so the
            # per-event lease renewal stays a HOT update.
            models.Index(fields=["state"], condition=Q(state__in=HOLDING_STATES), name="run_holding_state"),
            models.Index(fields=["-created_at"], name="run_created_desc"),
            # The on-call page and the needs-a-human counts read only these few states, newest first.
            models.Index(fields=["state", "-created_at", "-id"], name="run_oncall_newest",
                         condition=Q(state__in=ONCALL_STATES)),
            models.Index(fields=["queued_at"], condition=Q(queued_until__isnull=False), name="run_queued"),
        ]
        triggers = kept_triggers()

    def __str__(self):
        return f"{self.workflow_id}:{self.intent} ({self.state})"

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def oncall_actions(self) -> tuple[str, ...]:
        """On-call's actions that apply to the run now (``machine.ONCALL_ACTIONS``): the services, the preview
        and the on-call page ask this."""
        return tuple(action for action, states in ONCALL_ACTIONS.items() if self.state in states)


class LedgerEvent(models.Model):
    """One fact of a run's history. Never updated or deleted: the database refuses it."""

    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="events",
                            db_index=False)  # event_unique_run_seq (run, seq) serves every lookup by run
    intent = models.CharField(max_length=500)  # the run's: the partition key on PostgreSQL (SPEC §13)
    seq = models.PositiveIntegerField()
    at = models.DateTimeField()
    stage = models.CharField(max_length=100, blank=True)
    kind = models.CharField(max_length=30, choices=EventKind.choices)
    actor = models.CharField(max_length=200)
    input_fingerprint = models.CharField(max_length=64)
    policy_version = models.CharField(max_length=100)
    env_fingerprint = models.CharField(max_length=500, blank=True)
    idempotency_key = models.CharField(max_length=200, blank=True)
    effect = models.JSONField(null=True, blank=True)
    evidence = models.JSONField(default=list, blank=True)
    reason_code = models.CharField(max_length=100, blank=True)
    data = models.JSONField(default=dict, blank=True)
    client_event_id = models.CharField(max_length=200, null=True, blank=True)
    usage = models.JSONField(default=dict, blank=True, db_default=Value({}, JSONField()))  # SPEC §16, hashed when set
    body_digest = models.CharField(max_length=64, blank=True)
    prev_hash = models.CharField(max_length=64, blank=True)
    hash = models.CharField(max_length=64)


    objects = RunRowsQuerySet.as_manager()
    class Meta:
        ordering = ["run_id", "seq"]  # (not "run": that would join the run for its own ordering)
        constraints = [
            models.UniqueConstraint(fields=["run", "seq"], name="event_unique_run_seq"),
            models.UniqueConstraint(
                fields=["run", "client_event_id"],
                condition=Q(client_event_id__isnull=False),
                name="event_unique_client_event_id",
            ),
            models.CheckConstraint(condition=Q(seq__gte=1), name="event_seq_positive"),
        ]
        indexes = [
            models.Index(fields=["at"], name="event_at"),
            models.Index(fields=["idempotency_key"], name="event_idempotency_key", condition=~Q(idempotency_key="")),
        ]
        triggers = append_only_triggers()

    def __str__(self):
        return f"{self.run_id}#{self.seq} {self.stage}:{self.kind}"


class EffectStatus(models.TextChoices):
    ATTEMPTED = "attempted"
    EFFECTIVE = "effective"
    VERIFIED = "verified"
    FAILED = "failed"
    UNKNOWN = "unknown"
    COMPENSATED = "compensated"
    ISOLATED = "isolated"


class Effect(models.Model):
    """One external side effect, keyed by its idempotency key; a projection of the ledger."""

    idempotency_key = models.CharField(max_length=200, unique=True)
    # Indexed by effect_intent_fp (workflow first) and effect_run, not by foreign-key indexes of their own.
    workflow = models.ForeignKey(Workflow, on_delete=models.PROTECT, related_name="effects", db_index=False)
    intent = models.CharField(max_length=500)
    input_fingerprint = models.CharField(max_length=64)
    stage = models.CharField(max_length=100)
    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="effects", db_index=False)
    status = models.CharField(max_length=20, choices=EffectStatus.choices, default=EffectStatus.ATTEMPTED)
    system = models.CharField(max_length=200, blank=True)
    operation = models.CharField(max_length=200, blank=True)
    reference = models.CharField(max_length=1000, blank=True)
    attempts = models.PositiveIntegerField(default=1)
    claimed_seq = models.PositiveIntegerField()
    last_seq = models.PositiveIntegerField()
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()


    objects = RunRowsQuerySet.as_manager()
    class Meta:
        ordering = ["created_at"]
        constraints = [
            models.CheckConstraint(condition=Q(status__in=EffectStatus.values), name="effect_status_valid"),
        ]
        indexes = [
            models.Index(fields=["workflow", "intent", "input_fingerprint"], name="effect_intent_fp"),
            models.Index(fields=["run"], name="effect_run"),
        ]
        triggers = kept_triggers()

    def __str__(self):
        return f"{self.stage}:{self.status} ({self.idempotency_key[:12]})"


class Checkpoint(models.Model):
    """Immutable; a new row per save. The latest per (workflow, intent) counts."""

    class Source(models.TextChoices):
        SERVER = "server"
        AGENT = "agent"

    # checkpoint_intent_latest leads with it.
    workflow = models.ForeignKey(Workflow, on_delete=models.PROTECT, related_name="checkpoints", db_index=False)
    intent = models.CharField(max_length=500)
    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="checkpoints")
    source = models.CharField(max_length=10, choices=Source.choices)
    payload = models.JSONField()
    staged = models.BooleanField(default=False, db_default=False)  # a staged run's checkpoint: never read by real decisions
    input_fingerprint = models.CharField(max_length=64)
    policy_version = models.CharField(max_length=100)
    env_fingerprint = models.CharField(max_length=500, blank=True)
    version_boundary = models.BigIntegerField(null=True, blank=True)
    # ``system`` or ``agent:<name>`` (the lease holder who saved it); "" on rows older than the field.
    saved_by = models.CharField(max_length=200, blank=True, default="", db_default="")
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField()


    objects = RunRowsQuerySet.as_manager()
    class Meta:
        ordering = ["-id"]
        indexes = [
            models.Index(fields=["workflow", "intent", "-id"], name="checkpoint_intent_latest"),
            models.Index(fields=["workflow", "intent", "input_fingerprint", "-id"], name="checkpoint_intent_fp_latest"),
            models.Index(fields=["expires_at"], name="checkpoint_expires"),
        ]
        triggers = [pgtrigger.Protect(name="immutable", operation=pgtrigger.Update), *kept_triggers()]

    def __str__(self):
        return f"checkpoint {self.pk} {self.workflow_id}:{self.intent}"


class Approval(models.Model):
    """A request for a human decision; once approved, a single-use permit for exactly that action."""

    class Kind(models.TextChoices):
        HIGH_IMPACT = "high_impact"
        COMPENSATION = "compensation"
        ESCALATION = "escalation"

    class Status(models.TextChoices):
        PENDING = "pending"
        APPROVED = "approved"
        REJECTED = "rejected"
        EXPIRED = "expired"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    kind = models.CharField(max_length=20, choices=Kind.choices)
    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="approvals")
    stage = models.CharField(max_length=100, blank=True)
    action = models.JSONField(default=dict)
    action_digest = models.CharField(max_length=64)
    policy_version = models.CharField(max_length=100)
    input_fingerprint = models.CharField(max_length=64)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    requested_by = models.CharField(max_length=200)
    requested_by_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    decided_by = models.CharField(max_length=200, blank=True)
    decided_role = models.CharField(max_length=20, blank=True)
    reason = models.TextField(blank=True)
    created_at = models.DateTimeField()
    deadline = models.DateTimeField()
    decided_at = models.DateTimeField(null=True, blank=True)
    consumed_at = models.DateTimeField(null=True, blank=True)
    consumed_seq = models.PositiveIntegerField(null=True, blank=True)
    # SPEC §17: the rules in force when it was requested, and the approving votes (each a ledger event).
    approvers = models.JSONField(default=default_approvers)
    quorum = models.PositiveSmallIntegerField(default=1)
    votes = models.JSONField(default=list, blank=True)  # [{by, at, reason}], oldest first
    amended_from = models.ForeignKey("self", null=True, blank=True, on_delete=models.RESTRICT, related_name="amendments")

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["run", "stage", "kind"], condition=Q(status="pending"), name="approval_one_pending"
            ),
            models.CheckConstraint(condition=Q(quorum__gte=1, quorum__lte=QUORUM_MAX), name="approval_quorum_range"),
            models.CheckConstraint(condition=Q(status__in=["pending", "approved", "rejected", "expired"]),
                                   name="approval_status_valid"),
        ]
        indexes = [
            models.Index(fields=["status", "deadline"], name="approval_status_deadline"),
            models.Index(fields=["run", "stage", "status"], name="approval_run_stage"),
        ]

    def __str__(self):
        return f"{self.kind} {self.stage} ({self.status})"


class AuditEntry(models.Model):
    """Human actions on the product, refused attempts included (the ledger holds only what happened)."""

    at = models.DateTimeField()
    actor = models.CharField(max_length=200)
    role = models.TextField()  # every role the actor held, joined by commas (a superuser holds them all)
    action = models.CharField(max_length=40)
    outcome = models.CharField(max_length=10)  # done | refused
    run = models.ForeignKey(Run, null=True, blank=True, on_delete=models.PROTECT, related_name="audit_entries")
    target = models.CharField(max_length=200, blank=True)
    code = models.CharField(max_length=60, blank=True)
    reason = models.TextField(blank=True)
    data = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-at"]
        verbose_name_plural = "audit entries"
        indexes = [models.Index(fields=["run", "at"], name="audit_run_at"),
                   # the fleet's refusals of the last hour, by actor (SPEC §15)
                   models.Index(fields=["actor", "at"], name="audit_refused_actor_at",
                                condition=models.Q(outcome="refused"))]
        triggers = append_only_triggers()

    def __str__(self):
        return f"{self.actor} {self.action} {self.outcome}"
