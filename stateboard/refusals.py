"""The one wrapper that records and answers a refused human action (pages and API alike).

``@refusals("retry")`` wraps a page view or an API method. A ``DomainError`` raised inside it — an
authorizer's ``Refused`` or a service's conflict or validation error — is written to the audit
trail (``ledger.services.audit_record``, outside the refused write's rolled-back transaction) and
answered: for the API as JSON with its ``code`` (re-raised to ``stateboard.errors``' handler); for
pages as the message in plain text with its status (htmx), a 403 page (a missing role: the page
never offered that button), or a redirect back with the message. Nothing else writes refusal audits.
"""

from __future__ import annotations

import functools
import uuid

from django.contrib import messages
from django.db import transaction
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from rest_framework.exceptions import ParseError
from rest_framework.request import Request

from ledger import services
from ledger.models import Approval, Run
from stateboard.errors import DomainError, Refused


def refusal_record(user, *, action: str, code: str, run_id=None, target: str = "", reason: str = "") -> None:
    """One refused attempt in the audit trail (a run that does not exist is named only in ``target``)."""
    if run_id is not None and not Run.objects.filter(id=run_id).exists():
        run_id = None
    with transaction.atomic():
        services.audit_record(user=user, action=action, outcome="refused", run_id=run_id,
                              target=str(target)[:200], code=code, reason=str(reason or "")[:1000])


def approval_subject(request, kwargs) -> tuple:
    """(run id, target) of an approval decision."""
    approval_id = kwargs.get("approval_id")
    run_id = Approval.objects.filter(id=approval_id).values_list("run_id", flat=True).first()
    return run_id, str(approval_id)


def _default_subject(request, kwargs) -> tuple:
    run_id = kwargs.get("run_id")
    target = run_id or kwargs.get("key") or _field(request, "key")
    return (run_id if isinstance(run_id, uuid.UUID) else None), str(target or "")


def _field(request, name: str) -> str:
    try:
        data = request.data if isinstance(request, Request) else request.POST
    except ParseError:  # a refused request with a malformed body is still a refusal
        return ""
    value = data.get(name, "") if hasattr(data, "get") else ""
    return value if isinstance(value, str) else ""


def page_message(exc: DomainError) -> str:
    """The error's detail, with the write gate's reasons when it gives some."""
    details = [r.get("detail", "") for r in exc.extra.get("reasons", []) if isinstance(r, dict)]
    return " ".join([exc.detail, *(d for d in details if d)])


def refusal_answer_page(request, exc: DomainError, back: str) -> HttpResponse:
    message = page_message(exc)
    if request.htmx:
        return HttpResponse(message, status=exc.status_code, content_type="text/plain; charset=utf-8")
    if isinstance(exc, Refused) or exc.status_code == 403:
        return render(request, "refused.html", {"message": message, "back": back}, status=403)
    messages.error(request, message)
    return redirect(back)


def refusals(action: str, *, subject=None, back=None, audit=(DomainError,)):
    """Record and answer refusals of a page view ``(request, **kw)`` or an API method ``(self, request, **kw)``.

    ``subject(request, kwargs) -> (run_id, target)`` names what was refused (default: the path's
    ``run_id``, else the claim ``key``); ``back(request)`` or a URL name is where a page goes back to;
    ``audit`` narrows which errors are recorded (agents' hot paths record authorizer refusals only).
    """
    subject = subject or _default_subject

    def decorate(view):
        @functools.wraps(view)
        def wrapped(*args, **kwargs):
            request = args[1] if len(args) > 1 and isinstance(args[1], Request) else args[0]
            try:
                return view(*args, **kwargs)
            except DomainError as exc:
                if isinstance(exc, audit) and request.user.is_authenticated:
                    run_id, target = subject(request, kwargs)
                    refusal_record(request.user, action=action, code=exc.code, run_id=run_id, target=target,
                                   reason=_field(request, "reason"))
                if isinstance(request, Request):
                    raise  # the API's exception handler answers JSON with the code
                target = back(request) if callable(back) else reverse(back or "dashboard")
                return refusal_answer_page(request, exc, target)
        return wrapped
    return decorate
