"""E-mail (SPEC §17): the Approve and Reject links of an e-mailed request that were used."""

from django.conf import settings
from django.db import models


class ApprovalLinkUse(models.Model):
    """A recipient's pair of links (Approve, Reject) used once: the nonce they share is unique, so a link
    decides once on every instance, whichever of the two is followed and however often."""

    class Decision(models.TextChoices):
        APPROVE = "approve"
        REJECT = "reject"

    nonce = models.CharField(max_length=64, unique=True)
    approval = models.ForeignKey("ledger.Approval", on_delete=models.CASCADE, related_name="+")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    decision = models.CharField(max_length=10, choices=Decision.choices)
    used_at = models.DateTimeField()

    def __str__(self):
        return f"{self.decision} {self.approval_id} by {self.user_id}"
