"""``POST /integrations/slack/actions/`` (SPEC §12.3): Slack's interaction callback for the buttons of
Stateboard's chat messages, behind the one pipeline with Slack's request signature as its authentication.

Slack signs every request (v0): ``X-Slack-Signature = v0=hex(HMAC-SHA256(secret, "v0:<ts>:<raw body>"))``
with ``X-Slack-Request-Timestamp = <ts>``. A bad signature, or a timestamp more than 300 s from now, is
401; the same signature again is 409 ``slack_replay``. The caller is the operator mapped to the payload's
(team id, user id). Every other answer is 200 at once: the outcome goes to the payload's ``response_url``.
"""

from __future__ import annotations

import hashlib
import hmac
import time
import uuid
from typing import NamedTuple

from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from django.http import QueryDict
from django.urls import path
from drf_spectacular.utils import extend_schema
from rest_framework import authentication, exceptions
from rest_framework.parsers import FormParser
from rest_framework.response import Response

from ledger import services
from stateboard.errors import DomainError, ParseFailed, decode_json_body
from stateboard.policy import PUBLIC, Policy, PolicyApi, policy_of, refusal_audit

TIMESTAMP_WINDOW_SECONDS = 300


class SlackCall(NamedTuple):
    """What the signature vouches for: the signature itself and the decoded payload."""

    signature: str
    payload: dict


def slack_signature(secret: str, timestamp: str, body: bytes) -> str:
    base = b"v0:" + timestamp.encode("ascii") + b":" + body
    return "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


class SlackSignatureAuthentication(authentication.BaseAuthentication):
    """Slack's v0 signature over the raw body, within the timestamp window; the caller is the operator
    mapped to the payload's Slack user (anonymous when none is: the decision is then refused)."""

    def authenticate(self, request):
        if "HTTP_X_SLACK_SIGNATURE" not in request.META:
            return None  # no credentials: anonymous, counted by the rate limit like any caller, then refused
        secret = settings.STATEBOARD_SLACK_SIGNING_SECRET
        if not secret:
            raise exceptions.AuthenticationFailed("Slack actions are off (STATEBOARD_SLACK_SIGNING_SECRET is unset).")
        timestamp = request.META.get("HTTP_X_SLACK_REQUEST_TIMESTAMP", "")
        signature = request.META.get("HTTP_X_SLACK_SIGNATURE", "")
        if not timestamp.isascii() or not timestamp.isdigit() or len(timestamp) > 12:
            raise exceptions.AuthenticationFailed("X-Slack-Request-Timestamp is missing or not a number.")
        if abs(time.time() - int(timestamp)) > TIMESTAMP_WINDOW_SECONDS:
            raise exceptions.AuthenticationFailed("X-Slack-Request-Timestamp is more than 300 s from now.")
        body = request._request.body
        if not hmac.compare_digest(slack_signature(secret, timestamp, body).encode(), signature.encode()):
            raise exceptions.AuthenticationFailed("The Slack signature does not match this body.")
        try:
            raw = QueryDict(body, encoding="utf-8").get("payload")
        except UnicodeDecodeError:
            raw = None
        if raw is None:
            raise ParseFailed("slack_payload_invalid", "The body must be form-encoded with a payload= field.")
        payload = decode_json_body(raw.encode())
        team_id, user_id = services.slack_user_of(payload)
        user = services.slack_operator(team_id=team_id, user_id=user_id)
        return (user or AnonymousUser()), SlackCall(signature, payload if isinstance(payload, dict) else {})

    def authenticate_header(self, request):
        return "Slack-Signature"


def _audit_kwargs(action) -> dict:
    try:
        return {"approval_id": str(uuid.UUID(action.approval_id))}
    except ValueError:
        return {}


@extend_schema(exclude=True)  # Slack's form-encoded callback, not a JSON operation of the agents' API
class SlackActionsApi(PolicyApi):
    policy = {"POST": Policy(roles=PUBLIC, authentication=(SlackSignatureAuthentication,), audit="slack_action",
                             audit_all=True)}
    parser_classes = [FormParser]

    def post(self, request):
        call = request.auth
        if not isinstance(call, SlackCall):
            raise exceptions.NotAuthenticated("Slack's request signature (X-Slack-Signature) is required.")
        services.slack_replay_guard(signature=call.signature)
        action = services.slack_action_parse(call.payload)
        if action is not None:
            reply_key = f"slack:reply:{call.signature}"
            user = request.user if request.user.is_authenticated else None
            try:
                services.slack_decide(action=action, user=user, reply_key=reply_key)
            except DomainError as error:  # refused, nothing changed: the person is told in Slack
                refusal_audit(policy_of(self, "POST"), error, request, _audit_kwargs(action))
                services.slack_refusal_reply(action=action, error=error, reply_key=reply_key)
        return Response(status=200)


urlpatterns = [path("actions/", SlackActionsApi.as_view(), name="slack_actions")]
