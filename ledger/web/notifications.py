"""The notifications page: the signed-in user's notifications, newest first, with mark-read forms
(real POSTs that work without JavaScript; with htmx the row is swapped in place and the menu's
badge, which listens for ``NOTIFICATIONS_CHANGED``, refetches itself)."""

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import trigger_client_event

from ledger import selectors, services
from stateboard.errors import NotFound
from stateboard.policy import ANY, NOTIFICATIONS_CHANGED, Policy, page

PER_PAGE = 50


@require_GET
@page(Policy(roles=ANY))
def notification_list(request):
    return _listed(request, section=False)


def _listed(request, *, section: bool):
    unread = (request.POST if request.method == "POST" else request.GET).get("unread") == "1"
    page = Paginator(selectors.notifications_for(user=request.user, unread=unread), PER_PAGE).get_page(
        request.GET.get("page"))
    template = "ledger/notification_list.html#notification-table" if section else "ledger/notification_list.html"
    return render(request, template, {"page": page, "unread": unread})


@require_POST
@page(Policy(roles=ANY))
def notification_read(request, notification_id):
    try:
        notification = services.notification_read(notification_id=notification_id, user=request.user)
    except NotFound:
        raise Http404("No such notification of yours.")
    if request.htmx:
        response = render(request, "ledger/notification_list.html#notification-row", {"notification": notification})
        return trigger_client_event(response, NOTIFICATIONS_CHANGED)
    return redirect(_back(request))


@require_POST
@page(Policy(roles=ANY))
def notification_read_all(request):
    """Mark every unread notification of the caller read (htmx: the table again, and the badge)."""
    marked = services.notifications_read_all(user=request.user)
    if request.htmx:
        response = _listed(request, section=True)
        return trigger_client_event(response, NOTIFICATIONS_CHANGED)
    messages.success(request, f"{marked} notification{'s' if marked != 1 else ''} marked read.")
    return redirect(_back(request))


@require_GET
@page(Policy(roles=ANY))
def notification_link(request):
    """The menu's Notifications link with its unread badge (polled, and refetched on ``NOTIFICATIONS_CHANGED``)."""
    return render(request, "ledger/partials/notifications_link.html", {"current": request.GET.get("current") == "1"})


def _back(request) -> str:
    back = reverse("ledger:notification_list")
    return back + "?unread=1" if request.POST.get("unread") == "1" else back
