"""One door: each endpoint declares its ``Policy`` once; one pipeline enforces it for every request.

API views subclass ``PolicyApi`` and declare ``policy = {"GET": Policy(...), "POST": Policy(...)}``;
page views are wrapped by ``@page(Policy(...))``. Both run the same checks in the order of SPEC §11.1:
authentication, rate limit, role, authorizer, the workflow's ``agents`` (an API body is parsed once
before the role: one that does not parse is 400 before anything reads it). Run-scoped writes
(``run_scope="holder"``) then go to their service, which under the run's lock answers a repeated
``client_event_id``, then checks the lease (``ledger.services.writer.lease_require``), the goal and the
transition. A refusal — the pipeline's, or a ``Refused`` raised by an authorizer further in — is recorded
in the audit trail once, here, when the policy names an ``audit`` action.

This module imports no app: the audit trail is reached through ``refusal_recorder``, wired by the
ledger app at start-up.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable, Literal

from django.contrib import messages
from django.contrib.auth.views import redirect_to_login
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from rest_framework import exceptions
from rest_framework.permissions import SAFE_METHODS
from rest_framework.request import Request
from rest_framework.views import APIView

from stateboard.errors import DomainError, Invalid, Refused
from stateboard.limits import client_address, over_rate, rate_limits
from stateboard.roles import ANY, PUBLIC, has_role, is_agent

__all__ = ["ANY", "PUBLIC", "Policy", "PolicyApi", "client_address", "page", "policy_of", "rate_limits"]


@dataclass(frozen=True)
class Policy:
    """Who may call an endpoint, and what the pipeline checks before its view runs.

    ``roles``: the roles that may call at all (``PUBLIC``: no sign-in). ``authorizer(user, subject)``:
    the action's authorizer (the one the page, API and service share), with ``subject(request, kwargs)``
    the object it decides on (None when the action needs none). ``run_scope="holder"``: an agent must
    hold the run's lease (checked by the service under the run's lock, after a repeated
    ``client_event_id``). ``agents(request, kwargs)``: the allow-lists (lists of agent names, empty =
    every agent) of the workflows the request acts on. ``rate``: the ``API_RATE_LIMITS`` class that
    counts it ("identity": agent/human/anon by who calls; None: exempt); ``rate_keys(request)``: the
    identities it is counted per, each against the whole rate (sign-in: the user name and the client
    address); None: the caller. ``audit``: the action name a refusal is recorded under (None: not
    audited; with ``rate_keys``, each lockout too); ``audit_all``: conflicts and validation errors too,
    not only refusals of who may act. ``authentication``: the authenticator classes that say who calls
    (a request signature instead of a token: the Slack callback); None: the API's tokens and sessions."""

    roles: frozenset[str] | str
    authorizer: Callable | None = None
    subject: Callable | None = None
    run_scope: Literal["none", "holder"] = "none"
    agents: Callable | None = None
    rate: str | None = "identity"
    rate_keys: Callable | None = None
    audit: str | None = None
    audit_all: bool = False
    authentication: tuple[type, ...] | None = None


def policy_of(view, method: str) -> Policy | None:
    """The policy a view (an API view class or a page function) declares for ``method``."""
    policies = getattr(view, "policy", None) or getattr(getattr(view, "view_class", None), "policy", None)
    if isinstance(policies, Policy):
        return policies
    if not policies:
        return None
    if method in ("HEAD", "OPTIONS") and method not in policies:
        method = "GET"
    return policies.get(method)


# ---------------------------------------------------------------- the checks, in order

def throttle_check(policy: Policy, request) -> None:
    """Raise ``Throttled`` (429 ``throttled`` with ``Retry-After``) when the request is over its class's rate
    for any of its keys (``stateboard.limits``); a key's first refusal in its window is a lockout, audited
    when the policy names an ``audit`` action. A limiter that cannot count lets the request through."""
    refused = over_rate(policy, request)
    if refused is None:
        return
    if refused.locked_now and policy.audit:
        lockout_audit(policy, request, refused.key)
    raise exceptions.Throttled(wait=refused.wait)


def access_check(policy: Policy, request, kwargs: dict) -> None:
    """Role, authorizer, the workflow's ``agents``: raise ``Refused`` (403) at the first that fails."""
    who_check(policy, request, kwargs)
    agents_check(policy, request, kwargs)


def who_check(policy: Policy, request, kwargs: dict) -> None:
    """The role, then the authorizer on its subject (named by the path: neither reads the body)."""
    user = request.user
    if policy.roles != PUBLIC and not has_role(user, *policy.roles):
        raise Refused("permission_denied", "Your role may not do this.")
    if policy.authorizer is not None:
        subject = policy.subject(request, kwargs) if policy.subject is not None else None
        policy.authorizer(user, subject)


def agents_check(policy: Policy, request, kwargs: dict) -> None:
    """The ``agents`` of the workflows the request acts on (read from its path or its body)."""
    if policy.agents is not None and is_agent(request.user):
        name = request.user.get_username()
        for allowed in policy.agents(request, kwargs):
            if allowed and name not in allowed:
                raise Refused("agent_not_allowed", "This workflow names the agents that may serve it; "
                                                   "you are not one of them.")


# ---------------------------------------------------------------- the refusals' audit (a port)

def _no_recorder(user, *, action: str, code: str, request, kwargs: dict, errors=None, actor: str = "") -> None:
    raise RuntimeError("No refusal recorder is wired (the ledger app sets stateboard.policy.refusal_recorder).")


refusal_recorder: Callable = _no_recorder


def refusal_audit(policy: Policy | None, exc: Exception, request, kwargs: dict) -> None:
    """Record a refusal under the policy's ``audit`` action (who could not act; with ``audit_all`` also
    conflicts and validation errors). An agent's request refused by a rule of the product (any 4xx
    ``DomainError``: a conflict, a validation error, a missing object) is recorded too, once, under the
    policy's ``audit`` action or the route's name: the fleet counts them by code (SPEC §15). Throttled,
    unauthenticated and unparsable requests are never recorded (DRF's exceptions, not ``DomainError``)."""
    if policy is None or not request.user.is_authenticated:
        return
    domain = isinstance(exc, DomainError)
    audited = policy.audit is not None and (isinstance(exc, Refused) or (policy.audit_all and domain))
    if not audited and not (domain and exc.status_code < 500 and is_agent(request.user)):
        return
    refusal_recorder(request.user, action=policy.audit or _route_action(request), code=exc.code, request=request,
                     kwargs=kwargs, errors=exc.extra.get("errors") if domain else None)


def _route_action(request) -> str:
    """An agent's refused request to an endpoint whose policy names no ``audit`` action: its route's name."""
    match = getattr(request, "resolver_match", None)
    return (match.url_name if match is not None and match.url_name else "request")[:40]


def lockout_audit(policy: Policy, request, key: str) -> None:
    """Record that ``key`` (a user name, a client address) is locked out of ``policy``'s action for the
    rest of its rate's window (once per lockout; the refused attempts themselves are not recorded)."""
    user = request.user if request.user.is_authenticated else None
    refusal_recorder(user, action=policy.audit, code="locked_out", request=request, kwargs={"key": key},
                     actor="" if user is not None else f"anonymous:{client_address(request)}")


# ---------------------------------------------------------------- the pipeline for API views

class PolicyApi(APIView):
    """A DRF view whose every request passes the policy it declares (a view without one refuses all)."""

    policy: dict[str, Policy] = {}
    permission_classes: list = []  # the policy is the permission
    throttle_classes: list = []  # the policy names the rate

    def get_authenticators(self):
        """The policy's authenticators when it names some, else the API's (``REST_FRAMEWORK``)."""
        policy = policy_of(self, self.request.method) if getattr(self, "request", None) is not None else None
        if policy is not None and policy.authentication is not None:
            return [authenticator() for authenticator in policy.authentication]
        return super().get_authenticators()

    def initial(self, request, *args, **kwargs):
        """DRF's ``initial`` with the checks in the contract's order: authentication, rate, role, authorizer,
        (the body's parse,) ``agents`` (DRF alone checks permissions before throttles). Who may act is
        decided from the path; what follows may read the body, so one that does not parse is refused first."""
        self.format_kwarg = self.get_format_suffix(**kwargs)
        neg = self.perform_content_negotiation(request)
        request.accepted_renderer, request.accepted_media_type = neg
        version, scheme = self.determine_version(request, *args, **kwargs)
        request.version, request.versioning_scheme = version, scheme
        request.user  # noqa: B018  authentication (a bad token is 401 here)
        policy = policy_of(self, request.method)
        if policy is None:
            if request.method.lower() in self.http_method_names and hasattr(self, request.method.lower()):
                raise Refused("permission_denied", "This endpoint declares no policy for this method.")
            return  # DRF answers 405
        throttle_check(policy, request)
        if policy.roles != PUBLIC and not request.user.is_authenticated:
            raise exceptions.NotAuthenticated()
        who_check(policy, request, kwargs)
        body_parse(request)
        agents_check(policy, request, kwargs)

    def handle_exception(self, exc):
        refusal_audit(policy_of(self, self.request.method), exc, self.request, self.kwargs)
        return super().handle_exception(exc)


# ---------------------------------------------------------------- the same pipeline for pages

NOTIFICATIONS_CHANGED = "notifications-changed"  # htmx event: the menu's unread badge refetches itself


def safe_next(request, default: str) -> str:
    """The page a form was posted from (its ``next``, when it is a path of this site's), else ``default``."""
    target = request.POST.get("next") or ""
    if target.startswith("/") and url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()},
                                                  require_https=request.is_secure()):
        return target
    return default


def page(policy: Policy, *, back: str | Callable | None = None):
    """Wrap a page view ``(request, **kwargs)`` in ``policy``: sign-in, rate, the form (a NUL refuses it
    whole, before an authorizer's subject reads it), role, authorizer, then the view. A refusal is recorded
    (``audit``) and answered as a page: plain text with its status for htmx, a page with its status for a
    missing role, an authorizer's refusal or a malformed request (400), else a redirect ``back`` with the
    message."""

    def decorate(view):
        @functools.wraps(view)
        def wrapped(request, **kwargs):
            if policy.roles != PUBLIC and not request.user.is_authenticated:
                if getattr(request, "htmx", False):  # a poll after the session ended: the whole page goes to sign-in
                    response = HttpResponse(status=401)
                    response["HX-Redirect"] = redirect_to_login(request.headers.get("HX-Current-URL") or "/")["Location"]
                    return response
                return redirect_to_login(request.get_full_path())
            try:
                throttle_check(policy, request)
            except exceptions.Throttled as exc:
                return throttled_answer_page(request, exc)
            try:
                if _form_holds_nul(request):
                    raise Invalid("nul_byte", "A form field holds a NUL character; it is refused, never sanitised.",
                                  status_code=400)
                access_check(policy, request, kwargs)
                return view(request, **kwargs)
            except DomainError as exc:
                refusal_audit(policy, exc, request, kwargs)
                target = back(request) if callable(back) else reverse(back or "dashboard")
                return refusal_answer_page(request, exc, target)

        wrapped.policy = policy
        return wrapped

    return decorate


def throttled_answer_page(request, exc: exceptions.Throttled) -> HttpResponse:
    """429 with ``Retry-After``: plain text for htmx, else the refusal page, linking back to this one."""
    wait = max(1, int(exc.wait or 1))
    message = f"Too many requests; try again in {wait} second{'s' if wait > 1 else ''}."
    if getattr(request, "htmx", False):
        response = HttpResponse(message, status=429, content_type="text/plain; charset=utf-8")
    else:
        response = render(request, "refused.html", {"message": message, "back": request.get_full_path()}, status=429)
    response["Retry-After"] = str(wait)
    return response


def page_message(exc: DomainError) -> str:
    """The error's detail, with the write gate's reasons when it gives some."""
    details = [r.get("detail", "") for r in exc.extra.get("reasons", []) if isinstance(r, dict)]
    return " ".join([exc.detail, *(d for d in details if d)])


def refusal_answer_page(request, exc: DomainError, back: str) -> HttpResponse:
    message = page_message(exc)
    if getattr(request, "htmx", False):
        return HttpResponse(message, status=exc.status_code, content_type="text/plain; charset=utf-8")
    if isinstance(exc, Refused) or exc.status_code in (400, 403):
        return render(request, "refused.html", {"message": message, "back": back}, status=exc.status_code)
    messages.error(request, message)
    return redirect(back)


def body_parse(request: Request) -> None:
    """Parse the body of a request that may carry one, once, before the checks and the view read it: one
    that does not parse is refused here (400 with the parser's code; another media type 415). (DRF keeps
    an empty body after a failed parse, so a read that swallowed the error would run the view on ``{}``.)"""
    if request.method not in SAFE_METHODS:
        request.data  # noqa: B018


def _form_holds_nul(request) -> bool:
    """Whether a page's posted form holds a NUL in a name or a value (refused whole by ``@page``)."""
    return any("\x00" in name or any("\x00" in value for value in values) for name, values in request.POST.lists())


def request_data(request):
    """The request's decoded body (API, parsed by the pipeline, or form), None for a form holding a NUL."""
    if isinstance(request, Request):
        return request.data
    return None if _form_holds_nul(request) else request.POST


def request_field(request, name: str) -> str:
    """A string field of the request's body, "" when absent or unreadable (an audit of a refusal reads it)."""
    try:
        data = request_data(request)
    except (exceptions.ParseError, exceptions.UnsupportedMediaType):
        return ""
    value = data.get(name, "") if hasattr(data, "get") else ""
    return value if isinstance(value, str) else ""

