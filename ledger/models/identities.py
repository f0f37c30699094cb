"""Who a person is at the organisation's identity provider (SPEC §17): their single sign-on identity, by
(issuer, ``sub``), and the approver groups the provider puts them in — kept apart from the roles, which
are Django's groups (``stateboard.roles``): an approver group named ``owner`` is no role."""

from django.conf import settings
from django.db import models


class SsoIdentity(models.Model):
    """A person's OpenID Connect identity: the issuer and its subject, one person each."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="sso_identities")
    issuer = models.CharField(max_length=500)
    sub = models.CharField(max_length=255)
    created_at = models.DateTimeField(auto_now_add=True)
    last_sign_in_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "SSO identities"
        constraints = [models.UniqueConstraint(fields=["issuer", "sub"], name="sso_identity_unique")]

    def __str__(self):
        return f"{self.issuer} {self.sub} → {self.user_id}"


class ApproverGroup(models.Model):
    """A group of the identity provider (its name as the provider spells it), with the people in it as of
    their last single sign-on: ``group:<name>`` in a stage's approvers. Grants no role."""

    name = models.CharField(max_length=200, unique=True)
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, related_name="approver_groups", blank=True)

    def __str__(self):
        return self.name
