"""Report rollups: what /reports/ reads instead of scanning runs (SPEC §7 figures per workflow and hour)."""

from django.db import models

from ledger.models.runs import Workflow


class ReportRollup(models.Model):
    """One workflow's hour: the runs triggered in it and what they did, recomputed whole (never
    incremented) by ``services.rollups_refresh``, so a repeated or concurrent sweep writes the same row.

    ``latency_histogram`` counts the hour's ``Run.decision_latency_ms`` per ``ledger.reports.LATENCY_BUCKETS_MS``
    bucket, so a window's P95 is exact to its bucket; ``outcomes`` counts recovery decisions by outcome.
    """

    workflow = models.ForeignKey(Workflow, on_delete=models.CASCADE, related_name="+",
                                 db_index=False)  # report_rollup_unique_hour leads with it
    hour = models.DateTimeField()  # the start of the hour (UTC) the runs were triggered in
    runs = models.PositiveIntegerField(default=0)
    completed = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    escalated = models.PositiveIntegerField(default=0)
    effects = models.PositiveIntegerField(default=0)
    duplicate_side_effects = models.PositiveIntegerField(default=0)
    unverified_completions = models.PositiveIntegerField(default=0)
    outcomes = models.JSONField(default=dict)
    latency_histogram = models.JSONField(default=list)
    computed_at = models.DateTimeField()  # when the sweep that wrote the row began reading

    class Meta:
        constraints = [models.UniqueConstraint(fields=["workflow", "hour"], name="report_rollup_unique_hour")]
        indexes = [models.Index(fields=["hour"], name="report_rollup_hour"),
                   models.Index(fields=["-computed_at"], name="report_rollup_computed")]

    def __str__(self):
        return f"{self.workflow_id} @ {self.hour:%Y-%m-%d %H:00}: {self.runs} runs"
