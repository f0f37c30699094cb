"""The product's own bookkeeping: notifications, the transactional outbox, the trace export's mark, replay
results, saved views."""

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.urls import reverse


class Notification(models.Model):
    """A message for one user (SPEC §5.3): stale claims to owners, pending approvals to editors,
    escalations to on-call. ``dedupe_key`` is unique per user, so a sweep that runs twice, or two
    at once, notifies once (the insert is ``ON CONFLICT DO NOTHING``)."""

    class Kind(models.TextChoices):
        STALE_CLAIM = "stale_claim"
        APPROVAL_PENDING = "approval_pending"
        ESCALATION = "escalation"
        RETENTION_EXPIRED = "retention_expired"
        ALERT = "alert"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notifications")
    kind = models.CharField(max_length=40)
    subject = models.CharField(max_length=300)
    url = models.CharField(max_length=500, blank=True)
    dedupe_key = models.CharField(max_length=400)
    created_at = models.DateTimeField()
    read_at = models.DateTimeField(null=True, blank=True)
    # What it is about: a run (and its intent) or a claim; ``done`` says what settled it (read_at set then).
    run_id = models.UUIDField(null=True, blank=True)
    intent = models.CharField(max_length=500, blank=True, default="", db_default="")
    claim_key = models.CharField(max_length=300, blank=True, default="", db_default="")
    done = models.CharField(max_length=200, blank=True, default="", db_default="")

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["user", "dedupe_key"], name="notification_unique_user_dedupe"),
        ]
        indexes = [
            models.Index(fields=["user", "-created_at", "-id"], name="notification_user_newest"),
            models.Index(fields=["user"], condition=Q(read_at__isnull=True), name="notification_user_unread"),
            # What settles a request or a claim finds its notifications not yet done, read or not.
            models.Index(fields=["dedupe_key"], condition=Q(done=""), name="notification_open_key"),
            models.Index(fields=["claim_key"], condition=Q(done="") & ~Q(claim_key=""), name="notification_open_claim"),
        ]

    def __str__(self):
        return f"{self.user_id}: {self.subject}"


class Outbox(models.Model):
    """A task to send to the broker, written in the transaction that decided it (a transactional outbox).

    Relayed on commit, best effort, and by a sweep for rows not yet sent, so a broker outage loses nothing.
    """

    task = models.CharField(max_length=200)
    args = models.JSONField(default=list, blank=True)
    kwargs = models.JSONField(default=dict, blank=True)
    dedupe_key = models.CharField(max_length=300, unique=True)
    countdown = models.PositiveIntegerField(default=0)  # seconds the broker holds the task back
    created_at = models.DateTimeField()
    sent_at = models.DateTimeField(null=True, blank=True)
    # A relay claims a row for a moment before sending it outside any transaction; a relay that dies
    # mid-send leaves a claim that lapses, and the row is sent again.
    claimed_until = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["id"], condition=Q(sent_at__isnull=True), name="outbox_unsent")]

    def __str__(self):
        return f"{self.task} ({'sent' if self.sent_at else 'pending'})"


class TraceMark(models.Model):
    """How far the trace export (SPEC §16, ``ledger/traces/``) has read the ledger: the last event, by
    (``at``, ``id``), of a batch the collector accepted. Advanced only after it accepted it."""

    name = models.CharField(max_length=100, unique=True)  # the exporter's (one per collector)
    at = models.DateTimeField()
    event_id = models.BigIntegerField()
    exported_at = models.DateTimeField()
    last_error = models.CharField(max_length=500, blank=True)

    def __str__(self):
        return f"{self.name} @ {self.at:%Y-%m-%d %H:%M:%S} #{self.event_id}"


class ReplayEval(models.Model):
    """One ``manage.py replay_eval``: decisions checked against the reference model (SPEC §7)."""

    episodes = models.PositiveIntegerField()
    decisions = models.PositiveIntegerField()
    correct = models.PositiveIntegerField()
    accuracy = models.FloatField()  # correct / decisions, 0..1
    seed = models.BigIntegerField()
    duplicates = models.PositiveIntegerField()  # idempotency keys whose effect happened twice
    unverified = models.PositiveIntegerField()  # runs completed with an effect stage not verified
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self):
        return f"replay seed {self.seed}: {self.correct}/{self.decisions}"


class SavedView(models.Model):
    """A named filter set of the runs page, stored server-side and shared by the team."""

    name = models.CharField(max_length=100, unique=True)
    query = models.CharField(max_length=2000, blank=True)
    created_by = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name

    def url(self) -> str:
        return reverse("ledger:run_list") + (f"?{self.query}" if self.query else "")
