"""Chat messages (SPEC §12.3): pending approvals, escalations and stale claims as Slack Block Kit messages
to the incoming webhook ``STATEBOARD_CHAT_WEBHOOK_URL``, and the outcome of a button to its ``response_url``.

A message is rendered (and redacted, ``stateboard.redact``) when it is decided and written as an outbox
row in that transaction (``outbox_put``, once per ``dedupe_key``); the relay sweep delivers it
(``chat_deliver``), so a request never waits for the chat service and a chat outage loses nothing.
Beside the outbox at the bottom of the services: it imports only the outbox.
"""

from __future__ import annotations

import logging

import httpx
from django.conf import settings
from django.urls import reverse

from knowledge.models import Claim
from ledger.models import Approval, LedgerEvent
from ledger.services.outbox import CHAT_TASK, outbox_put
from stateboard.redact import redact

log = logging.getLogger(__name__)

TIMEOUT = httpx.Timeout(10.0, connect=3.0)  # below the outbox claim (30 s): a slow delivery is not sent twice
EVIDENCE_LINKS = 5
TEXT_MAX = 2900  # a section's text may hold 3000 characters
# Block and action ids the callback reads back (ledger.services.slack).
REASON_BLOCK, REASON_ACTION = "reason", "reason"
APPROVAL_ACTIONS = ("approve", "reject")
ESCALATION_ACTIONS = ("retry", "abandon")


class ChatUnavailable(RuntimeError):
    """The chat service did not take the message (down, 5xx, rate-limited): the outbox row stays."""


def chat_enabled() -> bool:
    return bool(settings.STATEBOARD_CHAT_WEBHOOK_URL)


def buttons_enabled() -> bool:
    return bool(settings.STATEBOARD_SLACK_SIGNING_SECRET)


def public_url(path: str) -> str:
    return settings.STATEBOARD_PUBLIC_URL.rstrip("/") + path


def esc(text) -> str:
    """Redacted text, escaped for Slack's mrkdwn (&, <, > are its control characters)."""
    return redact(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def link(url: str, label: str) -> str:
    return f"<{redact(url).replace('|', '%7C').replace('>', '%3E')}|{esc(label)}>"


def _section(text: str) -> dict:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text[:TEXT_MAX]}}


def _header(text: str) -> dict:
    return {"type": "header", "text": {"type": "plain_text", "text": redact(text)[:150]}}


def _button(action_id: str, label: str, value: str, style: str) -> dict:
    return {"type": "button", "action_id": action_id, "value": value, "style": style,
            "text": {"type": "plain_text", "text": label}}


def _reason_input(label: str) -> dict:
    return {"type": "input", "block_id": REASON_BLOCK, "optional": True,
            "label": {"type": "plain_text", "text": label},
            "element": {"type": "plain_text_input", "action_id": REASON_ACTION}}


def _evidence_links(run_id) -> list[str]:
    """The run's latest evidence URIs (newest first), as links."""
    links: list[str] = []
    for evidence in (LedgerEvent.objects.filter(run_id=run_id).exclude(evidence=[]).order_by("-seq")
                     .values_list("evidence", flat=True)[:EVIDENCE_LINKS]):
        for item in evidence if isinstance(evidence, list) else []:
            uri = item.get("uri") if isinstance(item, dict) else None
            if isinstance(uri, str) and uri and len(links) < EVIDENCE_LINKS:
                links.append(link(uri, uri))
    return links


def approval_message(approval: Approval) -> dict:
    """The Block Kit message for a pending request: run, intent, action, evidence, the deciding page, and
    (with a signing secret) the buttons for exactly this request."""
    run = approval.run
    escalation = approval.kind == Approval.Kind.ESCALATION
    action = approval.action or {}
    if escalation:
        title = f"Run of {run.workflow.slug} escalated"
        page = public_url(reverse("ledger:oncall"))
    else:
        title = f"Approval needed ({approval.kind.replace('_', '-')}) on {run.workflow.slug}/{approval.stage}"
        page = public_url(f"{reverse('ledger:approval_list')}#approval-{approval.id}")
    run_link = link(public_url(reverse("ledger:run_detail", args=[run.id])), str(run.id)[:8])
    facts = [f"*Run* {run_link} · *Workflow* `{esc(run.workflow.slug)}` · *Intent* `{esc(run.intent)}`"
             + (f" · *Stage* `{esc(approval.stage)}`" if approval.stage else "")]
    if escalation:
        facts.append(f"*Why* {esc((run.decision or {}).get('reason_code') or 'needs on-call')}")
    facts.append(f"*Action* `{esc(action.get('system', ''))}` {esc(action.get('operation', ''))} "
                 f"→ `{esc(action.get('target', ''))}`\n{esc(action.get('summary', ''))}")
    evidence = _evidence_links(run.id)
    blocks = [_header(title), _section("\n".join(facts))]
    if evidence:
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": "Evidence: " + ", ".join(evidence)}]})
    blocks.append(_section(link(page, "Decide in Stateboard" if not escalation else "Open the on-call page")))
    if buttons_enabled():
        value = str(approval.id)
        if escalation:
            blocks.append(_reason_input("Reason (needed to abandon)"))
            buttons = [_button("retry", "Retry", value, "primary"), _button("abandon", "Abandon", value, "danger")]
        else:
            blocks.append(_reason_input("Reason (needed to reject)"))
            buttons = [_button("approve", "Approve", value, "primary"), _button("reject", "Reject", value, "danger")]
        blocks.append({"type": "actions", "block_id": f"decide:{value}", "elements": buttons})
    text = f"{title}: {action.get('summary', '')}"
    return {"text": redact(text)[:TEXT_MAX], "blocks": blocks}


def chat_approval_post(approval: Approval) -> bool:
    """Queue the message for a new pending request (once per request); nothing without a webhook."""
    if not chat_enabled():
        return False
    return outbox_put(task=CHAT_TASK, kwargs={"body": approval_message(approval)},
                      dedupe_key=f"chat:{approval.kind}:{approval.id}")


def claim_message(claim, url: str) -> dict:
    title = f"Claim {claim.key} is stale"
    refresh = f"{claim.refresh_after:%Y-%m-%d %H:%M} UTC" if claim.refresh_after else "-"
    sources = [link(ref, ref) for ref in (claim.source_refs or []) if isinstance(ref, str)][:EVIDENCE_LINKS]
    text = (f"*Claim* `{esc(claim.key)}` (version {claim.version}) · *refresh after* {refresh} passed\n"
            f"{esc(claim.statement)}")
    blocks = [_header(title), _section(text)]
    if sources:
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": "Evidence: " + ", ".join(sources)}]})
    blocks.append(_section(link(public_url(url), "Refresh, invalidate or revoke it in Stateboard")))
    return {"text": redact(f"{title}: refresh, invalidate or revoke it.")[:TEXT_MAX], "blocks": blocks}


def chat_claims_stale_post(*, claim_ids) -> int:
    """Queue one message per stale claim version (knowledge's stale sweep calls it through its port)."""
    if not chat_enabled() or not claim_ids:
        return 0
    posted = 0
    for claim in Claim.objects.filter(id__in=list(claim_ids)).order_by("id"):
        url = reverse("knowledge:claim_history", args=[claim.key])
        posted += outbox_put(task=CHAT_TASK, kwargs={"body": claim_message(claim, url)},
                             dedupe_key=f"chat:stale:{claim.key}:{claim.version}"[:300])
    return posted


def chat_reply(*, response_url: str, text: str, dedupe_key: str, replace: bool) -> bool:
    """Queue the answer to a button: the outcome replaces the message (its buttons go); a refusal is shown
    to the person who pressed it only, and the message keeps its buttons."""
    if not response_url:
        return False
    body = {"text": redact(text)[:TEXT_MAX], "replace_original": replace}
    if replace:
        body["blocks"] = [_section(esc(text))]
    else:
        body["response_type"] = "ephemeral"
    return outbox_put(task=CHAT_TASK, kwargs={"body": body, "response_url": response_url}, dedupe_key=dedupe_key)


def post_or_raise(url: str, unavailable: type[Exception], what: str, **request) -> bool:
    """POST to a receiver (``request``: httpx's ``json=`` or ``content=``, ``headers=``): True when taken, False
    when refused for good (another 4xx: logged, dropped); raises ``unavailable`` when worth trying again
    (unreachable, 5xx, 408, 429). The chat messages' and the alerts' deliveries share it."""
    try:
        answer = httpx.post(url, timeout=TIMEOUT, **request)
    except httpx.HTTPError as exc:
        raise unavailable(f"{what} unreachable: {type(exc).__name__}") from None
    if answer.status_code >= 500 or answer.status_code in (408, 429):
        raise unavailable(f"{what} answered {answer.status_code}")
    if answer.status_code >= 400:
        log.warning("%s refused for good (%s %s); dropped", what, answer.status_code, answer.text[:200])
        return False
    return True


def chat_deliver(*, body: dict, response_url: str = "") -> str:
    """POST one message (run by the outbox relay). Raises ``ChatUnavailable`` when it should be tried again
    (unreachable, 5xx, 408, 429); a message the service refuses for good (another 4xx) is logged and dropped."""
    url = response_url or settings.STATEBOARD_CHAT_WEBHOOK_URL
    if not url:
        log.warning("chat: a message was queued but STATEBOARD_CHAT_WEBHOOK_URL is no longer set; dropped")
        return "dropped"
    return "delivered" if post_or_raise(url, ChatUnavailable, "chat service", json=body) else "dropped"
