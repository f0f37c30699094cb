"""The fleet page (SPEC §15): every agent with its last request, the runs it holds, its leases and refused
requests of the last hour and its token's state; an owner revokes an agent's token there (audited)."""

from django.contrib import messages
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from ledger import agent_selectors, authorizers
from ledger.identities import agent_revoke as agent_token_revoke
from ledger.web.common import form_checked
from ledger.web.forms import RequiredReasonForm
from stateboard.policy import ANY, Policy, page


@require_GET
@page(Policy(roles=ANY, authorizer=authorizers.may_see_fleet))
def agent_list(request):
    template = "ledger/agent_list.html#fleet-table" if request.htmx else "ledger/agent_list.html"
    return render(request, template, {"agents": agent_selectors.fleet()})


@require_POST
@page(Policy(roles=ANY, authorizer=authorizers.may_revoke_agent, audit="agent_revoke", audit_all=True),
      back="ledger:agent_list")
def agent_revoke(request, name):
    reason = form_checked(RequiredReasonForm(request.POST)).reason_text()
    agent_token_revoke(name=name, user=request.user, reason=reason)
    done = f"{name}'s token is revoked: its next call is refused (401)."
    if not request.htmx:
        messages.success(request, done)
        return redirect(reverse("ledger:agent_list"))
    return render(request, "ledger/agent_list.html#fleet-row",
                  {"agent": agent_selectors.fleet(name=name)[0], "changed": done})
