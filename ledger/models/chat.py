"""Chat (SPEC §12.3): who an operator is in Slack, and the request signatures already seen."""

from django.conf import settings
from django.db import models


class SlackIdentity(models.Model):
    """An operator's Slack user, by (team id, user id): who decides when a button in Slack is pressed."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="slack_identities")
    team_id = models.CharField(max_length=50)
    slack_user_id = models.CharField(max_length=50)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team_id", "slack_user_id"], name="slack_identity_unique")]

    def __str__(self):
        return f"{self.team_id}:{self.slack_user_id} → {self.user_id}"


class SlackSignature(models.Model):
    """A Slack request signature seen once: unique, so a replay is refused on every instance; rows past
    the replay window are pruned by the approvals sweep."""

    signature = models.CharField(max_length=100, unique=True)
    seen_at = models.DateTimeField(db_index=True)

    def __str__(self):
        return self.signature
