"""Deciding a request from its e-mailed link (SPEC §17): as the person it was mailed to, ``via: email``,
through ``approval_decide`` — the inbox's service, so its rules are the inbox's."""

from __future__ import annotations

from django.db import IntegrityError, transaction
from django.utils import timezone

from ledger import authorizers
from ledger.approval_links import ApprovalLink, approval_link_problem
from ledger.models import Approval, ApprovalLinkUse
from ledger.services.approvals import approval_decide
from stateboard.errors import Conflict


@transaction.atomic
def approval_link_decide(*, link: ApprovalLink, user, reason: str = "") -> Approval:
    """Decide as the link says, as ``user`` (its addressee). The link's pair is spent in the decision's
    transaction: its nonce is unique, so it decides once on every instance (409 ``approval_link_used``); a
    refused decision (a reject without a reason, a request decided or expired meanwhile) spends nothing."""
    authorizers.may_use_approval_link(user, link)
    now = timezone.now()
    problem = approval_link_problem(link, now)
    if problem is not None:
        raise Conflict(f"approval_link_{problem.code}", problem.detail)
    try:
        with transaction.atomic():
            ApprovalLinkUse.objects.create(nonce=link.nonce, approval_id=link.approval.id, user_id=user.pk,
                                           decision=link.verb, used_at=now)
    except IntegrityError:
        raise Conflict("approval_link_used", "This link was used already: a link decides once.")
    return approval_decide(approval_id=link.approval.id, user=user, approve=link.verb == "approve", reason=reason,
                           via="email")
