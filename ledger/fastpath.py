"""The agent's two most frequent requests answered at the door — ``POST /api/v1/runs/{id}/events/`` and
``POST /api/v1/runs/`` (a trigger, most often a duplicate) in their common form — without the page
middleware, the URL resolver and DRF's request cycle around them.

A request spends as much Python in the stack around it (session, CSRF, messages and auth middleware that
an API call does not use, URL resolution, DRF's request, negotiation, parsers, permissions and renderer)
as in the ledger's own work. ``AgentFastPath`` takes these requests exactly when the answer cannot differ
from the full stack's: no query string, a JSON body, ``Accept`` absent, ``*/*`` or ``application/json``, a
token already in the per-process cache (``ledger.auth``), a body that decodes
(``stateboard.errors.decode_json_body``) and a role the authorizer accepts. The answer is the view's own
(``ledger.api.append_answer``, ``ledger.api.trigger_answer``), the token confirmed by the request's first
read, rendered by DRF's renderer. Anything else — and a token found changed, or the authorizer's refusal,
which is audited there — is handed, untouched, to the full stack, which answers it as it always has.
Nothing is written before a request is handed over. ``API_FAST_PATH = False`` turns it off (tests
compare both)."""

from __future__ import annotations

import functools
import re
import time
import uuid

from django.conf import settings
from django.core.exceptions import DisallowedHost, PermissionDenied
from django.http import HttpResponse
from django.middleware.clickjacking import XFrameOptionsMiddleware
from django.middleware.common import CommonMiddleware
from django.urls import reverse
from django.urls.converters import UUIDConverter
from rest_framework import HTTP_HEADER_ENCODING, exceptions
from rest_framework.renderers import JSONRenderer

from ledger import sql, token_sql
from ledger.api import RunEventsApi, RunListCreateApi, append_answer, trigger_answer
from ledger.auth import confirming, token_cached_user, token_forget, token_key_hash
from stateboard.errors import DomainError, ParseFailed, Refused, accepts_at_once, decode_json_body

_JSON = "application/json"


@functools.cache
def _routes() -> tuple:
    """(path pattern as the URLconf spells it, its view, answer(user, path match, body, arrived)) for the
    requests answered here: the append and the trigger."""
    sentinel = uuid.UUID(int=0)
    prefix, suffix = reverse("run_events", kwargs={"run_id": sentinel}).split(str(sentinel))
    events = re.compile(f"{re.escape(prefix)}({UUIDConverter.regex}){re.escape(suffix)}")
    runs = re.compile(re.escape(reverse("run_list")))
    return ((events, RunEventsApi, lambda user, match, data, arrived: append_answer(user, uuid.UUID(match.group(1)), data)),
            (runs, RunListCreateApi, lambda user, match, data, arrived: trigger_answer(user, lambda: data, arrived)))


@functools.cache
def _allow(view_class) -> str:
    view = view_class()
    view.setup(None)  # as for a request: a view with GET also serves HEAD
    return ", ".join(view.allowed_methods)  # the header DRF's view sends


def _authorization(meta) -> bytes:
    """``rest_framework.authentication.get_authorization_header`` read from META (which ``request.headers``,
    the one it reads, is built from whole at its first use)."""
    header = meta.get("HTTP_AUTHORIZATION", b"")
    return header.encode(HTTP_HEADER_ENCODING) if isinstance(header, str) else header


class AgentFastPath:
    answered = 0  # requests this process answered here (tests read it)

    def __init__(self, get_response):
        self.get_response = get_response
        self.renderer = JSONRenderer()
        # Of the middleware this skips, CommonMiddleware checks the request (the Host against ALLOWED_HOSTS,
        # refused user agents, redirects) and with XFrameOptionsMiddleware sets headers on the answer
        # (Content-Length, X-Frame-Options); the rest do nothing to an API call. The middleware above
        # this one (the body limit, the security headers) sees every request anyway.
        self.common = CommonMiddleware(get_response)
        self.finish = [XFrameOptionsMiddleware(get_response).process_response, self.common.process_response]

    def __call__(self, request):
        if request.method == "POST" and settings.API_FAST_PATH and sql.available():
            response = self._answer(request)
            if response is not None:
                AgentFastPath.answered += 1
                return response
        return self.get_response(request)

    def _answer(self, request) -> HttpResponse | None:
        arrived = time.monotonic()
        meta = request.META
        for route, view_class, answer in _routes():
            match = route.fullmatch(request.path)
            if match is not None:
                break
        content_type = meta.get("CONTENT_TYPE", "")
        if (match is None or not accepts_at_once(meta, _JSON)
                or not (content_type == _JSON or content_type.startswith(_JSON + ";"))):
            return None
        try:
            if self.common.process_request(request) is not None:
                return None
        except (DisallowedHost, PermissionDenied):  # the full stack answers them (400, 403)
            return None
        try:
            key_hash = token_key_hash(_authorization(meta))
        except exceptions.AuthenticationFailed:
            return None
        cached = token_cached_user(key_hash) if key_hash else None
        if cached is None:
            return None
        try:
            data = decode_json_body(request.body)
        except ParseFailed:
            return None
        user, pending = cached
        try:
            body, status_code = confirming(pending, lambda: answer(user, match, data, arrived))
        except token_sql.TokenChanged:
            token_forget(key_hash)
            return None
        except Refused:
            return None  # the authorizer's no, before any write: the full stack audits and answers it
        except DomainError as exc:
            body, status_code = exc.as_dict(), exc.status_code
        response = HttpResponse(self.renderer.render(body), status=status_code, content_type=_JSON)
        response["Allow"] = _allow(view_class)
        for finish in self.finish:
            response = finish(request, response)
        return response
