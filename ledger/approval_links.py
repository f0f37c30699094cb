"""The Approve and Reject links of an e-mailed request (SPEC §17): signed with Django's signing (the
``SECRET_KEY``, a salt of their own), bound to the request, its action digest and the one person they were
mailed to, expiring with the request's deadline. A recipient's two links share a nonce; using either records
it (``ApprovalLinkUse``, unique: ``services.approval_link_decide``), so the pair decides once.

Reads only: the service decides, the page (``ledger/web/approval_links.py``) confirms first."""

from __future__ import annotations

import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime
from datetime import timezone as dt_timezone

from django.contrib.auth import get_user_model
from django.core import signing
from django.urls import reverse
from django.utils import timezone

from ledger.domain.approval_rules import vote_of
from ledger.models import Approval, ApprovalLinkUse
from stateboard.errors import Invalid
from stateboard.roles import actor_for

SALT = "stateboard.approval-link"
VERBS = ("approve", "reject")
# What each link does, in the words the inbox uses for the request's kind.
LABELS = {"approve": "Approve", "reject": "Reject"}
ESCALATION_LABELS = {"approve": "Retry the run", "reject": "Abandon the run"}


@dataclass(frozen=True)
class ApprovalLink:
    """A genuine link: the request it names (with its run and workflow), to whom it was sent, what it does."""

    approval: Approval
    user_id: int
    verb: str
    digest: str
    nonce: str
    expires_at: datetime

    @property
    def label(self) -> str:
        return labels_of(self.approval)[self.verb]


@dataclass(frozen=True)
class LinkProblem:
    """Why a genuine link decides nothing any more: ``code`` (``approval_link_<code>``) and the words."""

    code: str
    detail: str


def labels_of(approval: Approval) -> dict[str, str]:
    return ESCALATION_LABELS if approval.kind == Approval.Kind.ESCALATION else LABELS


def approval_link_paths(approval: Approval, user_id: int) -> list[tuple[str, str]]:
    """(label, path) of the Approve and Reject links for ``user_id``: a fresh nonce the two share."""
    nonce = secrets.token_urlsafe(16)
    expires = int(approval.deadline.timestamp())
    labels = labels_of(approval)
    paths = []
    for verb in VERBS:
        token = signing.dumps({"a": str(approval.id), "d": approval.action_digest, "u": user_id, "v": verb,
                               "n": nonce, "e": expires}, salt=SALT)
        paths.append((labels[verb], reverse("ledger:approval_link", args=[approval.id, token])))
    return paths


def _refused(detail: str) -> Invalid:
    return Invalid("approval_link_invalid", f"This approval link is not valid: {detail} Decide in the approvals "
                                            "inbox instead.", status_code=400)


def approval_link_read(token: str, *, approval_id) -> ApprovalLink:
    """The link of a path, checked: 400 ``approval_link_invalid`` when its signature does not hold (altered,
    cut short, another install's) or it names another request than its path."""
    try:
        data = signing.loads(token, salt=SALT)
    except signing.BadSignature:
        raise _refused("it was altered or cut short.")
    fields = {"a": str, "d": str, "u": int, "v": str, "n": str, "e": int}
    if not isinstance(data, dict) or any(not isinstance(data.get(k), t) for k, t in fields.items()) \
            or data["v"] not in VERBS or data["a"] != str(approval_id):
        raise _refused("it does not name this request.")
    try:
        approval = Approval.objects.select_related("run__workflow").get(id=uuid.UUID(data["a"]))
    except (Approval.DoesNotExist, ValueError):
        raise _refused("its request does not exist here.")
    return ApprovalLink(approval=approval, user_id=data["u"], verb=data["v"], digest=data["d"], nonce=data["n"],
                        expires_at=datetime.fromtimestamp(data["e"], tz=dt_timezone.utc))


def approval_link_problem(link: ApprovalLink, now: datetime | None = None) -> LinkProblem | None:
    """Why the link decides nothing any more (used, another action, decided, expired), or None: it may."""
    now = now or timezone.now()
    approval = link.approval
    used = ApprovalLinkUse.objects.filter(nonce=link.nonce).values_list("decision", "used_at").first()
    if used is not None:
        return LinkProblem("used", f"This link was used already: you chose to {used[0]} this request "
                                   f"(at {used[1]:%Y-%m-%d %H:%M} UTC). A link decides once.")
    if approval.action_digest != link.digest:
        return LinkProblem("changed", "The request's action is not the one this link was sent for.")
    if approval.status in (Approval.Status.APPROVED, Approval.Status.REJECTED):
        by = f" by {approval.decided_by}" if approval.decided_by else ""
        return LinkProblem("decided", f"This request is already {approval.status}{by}.")
    if approval.status == Approval.Status.EXPIRED:
        return LinkProblem("expired", "This request is no longer pending: it expired, or was voided (amended).")
    if now > min(link.expires_at, approval.deadline):
        return LinkProblem("expired", f"This request's deadline passed at {approval.deadline:%Y-%m-%d %H:%M} UTC, "
                                      "and its links expired with it.")
    if link.verb == "approve" and approval.votes:  # voted elsewhere (the inbox, the API, chat): nothing to add
        addressee = get_user_model().objects.filter(pk=link.user_id).first()
        vote = vote_of(approval.votes, actor_for(addressee)) if addressee is not None else None
        if vote is not None:
            return LinkProblem("voted", f"You approved this request already (at {vote['at'][:16].replace('T', ' ')} "
                                        "UTC): a vote counts once. Its Reject link still works.")
    return None
