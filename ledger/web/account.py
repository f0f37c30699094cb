"""The signed-in person's own page: their name, the address e-mail (approval links included) goes to, their
roles and their approver groups (SPEC §17: kept apart from roles), and how they sign in."""

from django.shortcuts import render
from django.views.decorators.http import require_GET

from ledger import selectors
from stateboard.policy import ANY, Policy, page


@require_GET
@page(Policy(roles=ANY))
def account(request):
    return render(request, "ledger/account.html", selectors.person_of(request.user))
