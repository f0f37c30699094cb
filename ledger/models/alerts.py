"""Alerts (SPEC §14): one instance of a workflow's rule for its subject, its append-only history, silences."""

from django.conf import settings
from django.db import models
from django.db.models import Q

from ledger.domain.alerts import KINDS, SEVERITIES, STATES
from ledger.models.runs import Workflow, append_only_triggers


class Alert(models.Model):
    """Keyed ``<workflow>/<rule>/<subject>``; the database holds at most one open alert per key."""

    key = models.CharField(max_length=400)
    workflow = models.ForeignKey(Workflow, on_delete=models.PROTECT, related_name="alerts_raised")
    rule = models.CharField(max_length=40)
    kind = models.CharField(max_length=20, choices=[(k, k) for k in KINDS])
    severity = models.CharField(max_length=10, choices=[(s, s) for s in SEVERITIES])
    state = models.CharField(max_length=15, choices=[(s, s) for s in STATES], default="firing")
    subject = models.CharField(max_length=300)
    summary = models.CharField(max_length=1000)
    # What it concerns (runs are partitioned: no foreign key, like Notification.run_id).
    run_id = models.UUIDField(null=True, blank=True)
    approval_id = models.UUIDField(null=True, blank=True)
    opened_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    resolved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-opened_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["key"], condition=~Q(state="resolved"), name="alert_one_open_per_key"),
            models.CheckConstraint(condition=Q(state__in=STATES), name="alert_state_valid"),
        ]
        indexes = [
            models.Index(fields=["workflow", "rule"], condition=~Q(state="resolved"), name="alert_open_rule"),
            models.Index(fields=["-opened_at", "-id"], name="alert_newest"),
        ]

    def __str__(self):
        return f"{self.key} ({self.state})"

    @property
    def is_open(self) -> bool:
        return self.state != "resolved"


class AlertChange(models.Model):
    """One change of an alert: never updated or deleted (the database refuses it)."""

    alert = models.ForeignKey(Alert, on_delete=models.PROTECT, related_name="changes")
    state = models.CharField(max_length=15, choices=[(s, s) for s in STATES])
    by = models.CharField(max_length=200)  # "system" for the evaluator
    at = models.DateTimeField()
    reason = models.TextField(blank=True)

    class Meta:
        ordering = ["id"]  # the order they were recorded in
        indexes = [models.Index(fields=["alert", "at"], name="alertchange_alert_at")]
        triggers = append_only_triggers()

    def __str__(self):
        return f"{self.alert_id} → {self.state} by {self.by}"


class AlertSilence(models.Model):
    """A rule silenced until ``until``: its alerts are recorded, not delivered. ``released_at``: the still-open
    alerts were delivered once after it ended."""

    workflow = models.ForeignKey(Workflow, on_delete=models.CASCADE, related_name="alert_silences")
    rule = models.CharField(max_length=40)
    until = models.DateTimeField()
    reason = models.TextField()
    by = models.CharField(max_length=200)
    by_user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                related_name="+")
    created_at = models.DateTimeField()
    released_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["workflow", "rule"], name="alertsilence_one_per_rule")]
        indexes = [models.Index(fields=["until"], condition=Q(released_at__isnull=True), name="alertsilence_unreleased")]

    def __str__(self):
        return f"{self.workflow_id}/{self.rule} until {self.until}"
