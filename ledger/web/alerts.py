"""The alerts page (SPEC §14): open alerts first (severity, age, subject, the runs concerned, the one action that
resolves each), then the latest resolved ones; on-call acknowledges (a note optional) or resolves (a reason) there."""

from django.contrib import messages
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from ledger import authorizers, selectors, services
from ledger.domain.alerts import OPEN_STATES
from ledger.web.common import form_checked
from ledger.web.forms import ReasonForm, RequiredReasonForm
from stateboard.policy import Policy, page
from stateboard.roles import EDITOR, ONCALL, OWNER

READERS = frozenset({ONCALL, OWNER, EDITOR})
RESOLVED_SHOWN = 50
OPEN_SHOWN = 500


@require_GET
@page(Policy(roles=READERS))
def alert_list(request):
    template = "ledger/alert_list.html#alert-tables" if request.htmx else "ledger/alert_list.html"
    return render(request, template, _tables())


def _tables() -> dict:
    alerts = selectors.alerts_listed().prefetch_related(None)  # (the page shows no history)
    return {"open": list(alerts.filter(state__in=OPEN_STATES)[:OPEN_SHOWN]),
            "resolved": list(alerts.filter(state="resolved")[:RESOLVED_SHOWN])}


def _handled(request, done: str):
    if not request.htmx:
        messages.success(request, done)
        return redirect(reverse("ledger:alert_list"))
    return render(request, "ledger/alert_list.html#alert-tables", _tables() | {"changed": done})


def _handle_policy(action: str) -> Policy:
    return Policy(roles=READERS, authorizer=authorizers.may_handle_alert, audit=action, audit_all=True)


@require_POST
@page(_handle_policy("alert_acknowledge"), back="ledger:alert_list")
def alert_acknowledge(request, alert_id: int):
    note = form_checked(ReasonForm(request.POST)).reason_text()
    alert = services.alert_acknowledge(alert_id=alert_id, user=request.user, note=note)
    return _handled(request, f"Acknowledged {alert.key}: it stays open until its condition ends or it is resolved.")


@require_POST
@page(_handle_policy("alert_resolve"), back="ledger:alert_list")
def alert_resolve(request, alert_id: int):
    reason = form_checked(RequiredReasonForm(request.POST)).reason_text()
    alert = services.alert_resolve(alert_id=alert_id, user=request.user, reason=reason)
    return _handled(request, f"Resolved {alert.key}." if alert else "That alert was resolved already.")
