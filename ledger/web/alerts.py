"""The alerts page (SPEC §14): open alerts first (severity, age, subject, the runs concerned, the one action that
resolves each), then the latest resolved ones."""

from django.shortcuts import render
from django.views.decorators.http import require_GET

from ledger import selectors
from ledger.domain.alerts import OPEN_STATES
from stateboard.policy import Policy, page
from stateboard.roles import EDITOR, ONCALL, OWNER

RESOLVED_SHOWN = 50
OPEN_SHOWN = 500


@require_GET
@page(Policy(roles=frozenset({ONCALL, OWNER, EDITOR})))
def alert_list(request):
    alerts = selectors.alerts_listed().prefetch_related(None)  # (the page shows no history)
    context = {"open": list(alerts.filter(state__in=OPEN_STATES)[:OPEN_SHOWN]),
               "resolved": list(alerts.filter(state="resolved")[:RESOLVED_SHOWN])}
    template = "ledger/alert_list.html#alert-tables" if request.htmx else "ledger/alert_list.html"
    return render(request, template, context)
