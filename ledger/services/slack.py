"""Decisions from Slack's buttons (SPEC §12.3): Approve / Reject on a request, Retry / Abandon on an
escalation, decided by ``approval_decide`` — the dashboard's service, with its authorizer (role,
four-eyes) and its rules (a reason to reject, the deadline) — as the mapped operator, ``via: slack``.

The callback is answered at once; the outcome (done, or refused with nothing changed) is queued for the
payload's ``response_url`` in the outbox. Above ``approvals``: it imports the verbs it calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from ledger.models import Approval, SlackIdentity, SlackSignature
from ledger.services.approvals import approval_decide
from ledger.services.chat import APPROVAL_ACTIONS, ESCALATION_ACTIONS, REASON_ACTION, REASON_BLOCK, chat_reply
from stateboard.errors import Conflict, DomainError, Invalid, NotFound, Refused
from stateboard.roles import actor_for

REPLAY_SECONDS = 600  # a signature seen within this window is a replay (the timestamp window is 300 s)
APPROVES = {"approve": True, "reject": False, "retry": True, "abandon": False}
DONE = {"approve": "Approved", "reject": "Rejected", "retry": "Retried", "abandon": "Abandoned"}


@dataclass(frozen=True)
class SlackAction:
    """The one button of a ``block_actions`` payload, and what the callback needs to answer it."""

    name: str  # approve, reject, retry, abandon
    approval_id: str
    reason: str
    response_url: str
    team_id: str
    user_id: str


def slack_user_of(payload) -> tuple[str, str]:
    """(team id, user id) of the person who pressed the button ("" when absent)."""
    user = payload.get("user") if isinstance(payload, dict) else None
    team = payload.get("team") if isinstance(payload, dict) else None
    user = user if isinstance(user, dict) else {}
    team_id = (team.get("id") if isinstance(team, dict) else None) or user.get("team_id") or ""
    return str(team_id), str(user.get("id") or "")


def slack_operator(*, team_id: str, user_id: str):
    """The operator mapped to this Slack user (``create_operator --slack-id TEAM:USER``), or None."""
    if not team_id or not user_id:
        return None
    identity = (SlackIdentity.objects.select_related("user").filter(team_id=team_id, slack_user_id=user_id)
                .first())
    return identity.user if identity is not None and identity.user.is_active else None


def slack_action_parse(payload) -> SlackAction | None:
    """The button pressed, or None for an interaction Stateboard does not act on (another type, another
    action). A payload without the fields Slack always sends is 400 ``slack_payload_invalid``."""
    if not isinstance(payload, dict) or not isinstance(payload.get("type"), str):
        raise Invalid("slack_payload_invalid", "The payload is not a Slack interaction.", status_code=400)
    if payload["type"] != "block_actions":
        return None
    actions = payload.get("actions")
    if not isinstance(actions, list) or not actions or not isinstance(actions[0], dict):
        raise Invalid("slack_payload_invalid", "A block_actions payload carries its actions.", status_code=400)
    name, value = actions[0].get("action_id"), actions[0].get("value")
    if name not in APPROVES or not isinstance(value, str):
        return None
    state = payload.get("state") if isinstance(payload.get("state"), dict) else {}
    values = state.get("values") if isinstance(state.get("values"), dict) else {}
    field = (values.get(REASON_BLOCK) or {}).get(REASON_ACTION) if isinstance(values.get(REASON_BLOCK), dict) else None
    reason = field.get("value") if isinstance(field, dict) else None
    response_url = payload.get("response_url")
    team_id, user_id = slack_user_of(payload)
    return SlackAction(name=name, approval_id=value, reason=reason if isinstance(reason, str) else "",
                       response_url=response_url if isinstance(response_url, str) else "",
                       team_id=team_id, user_id=user_id)


def slack_replay_guard(*, signature: str, now: datetime | None = None) -> None:
    """Remember the signature; one seen before is 409 ``slack_replay``. The unique index decides, so a
    replay is refused whichever instance it reaches (committed at once, whatever the decision does)."""
    try:
        with transaction.atomic():
            SlackSignature.objects.create(signature=signature, seen_at=now or timezone.now())
    except IntegrityError:
        raise Conflict("slack_replay", "This Slack request was received before (the same signature).")


def slack_signatures_prune(*, now: datetime | None = None) -> int:
    """Forget signatures past the replay window (their timestamps are refused anyway); safe twice."""
    cutoff = (now or timezone.now()) - timedelta(seconds=REPLAY_SECONDS)
    return SlackSignature.objects.filter(seen_at__lt=cutoff).delete()[0]


@transaction.atomic
def slack_decide(*, action: SlackAction, user, reply_key: str) -> str:
    """Decide as ``user`` (the mapped operator) through ``approval_decide``, queue the outcome for the
    message's ``response_url``, and return it. A refusal raises (``DomainError``) with nothing changed."""
    if user is None:
        raise Refused("slack_user_unknown", f"Slack user {action.team_id}:{action.user_id} is not an operator here "
                                            f"(map them with create_operator --slack-id TEAM:USER).")
    try:
        approval = Approval.objects.select_related("run__workflow").get(id=action.approval_id)
    except (Approval.DoesNotExist, ValueError, TypeError, DjangoValidationError):
        raise NotFound("approval_not_found", f"No approval with id {action.approval_id}.")
    expected = ESCALATION_ACTIONS if approval.kind == Approval.Kind.ESCALATION else APPROVAL_ACTIONS
    if action.name not in expected:
        raise Invalid("slack_action_mismatch", f"{action.name!r} does not apply to a {approval.kind} request.")
    decided = approval_decide(approval_id=approval.id, user=user, approve=APPROVES[action.name],
                              reason=action.reason.strip(), via="slack")
    actor = actor_for(user)
    if decided.status == "pending":  # a vote towards the quorum (SPEC §17)
        text = (f"Vote by {actor} via Slack: {len(decided.votes)} of {decided.quorum} approvals for "
                f"{approval.run.workflow.slug}/{approval.stage or '-'}; the request waits for more.")
    elif approval.kind != Approval.Kind.ESCALATION and decided.decided_by != actor:
        text = f"Already {decided.status} by {decided.decided_by}; nothing changed."
    else:
        run = approval.run
        run.refresh_from_db(fields=["state"])
        text = (f"{DONE[action.name]} by {actor} via Slack: {run.workflow.slug}/{approval.stage or '-'} "
                f"({approval.action.get('summary', '')}). The run is {run.state}."
                + (f" Reason: {action.reason.strip()}" if action.reason.strip() else ""))
    chat_reply(response_url=action.response_url, text=text, dedupe_key=reply_key, replace=True)
    return text


def slack_refusal_reply(*, action: SlackAction, error: DomainError, reply_key: str) -> None:
    """Tell the person who pressed the button why nothing was done (only them; the buttons stay)."""
    with transaction.atomic():
        chat_reply(response_url=action.response_url, text=f"Not done ({error.code}): {error.detail} Nothing changed.",
                   dedupe_key=reply_key, replace=False)
