"""The notifications page: the signed-in user's notifications, newest first, with mark-read forms
(real POSTs that work without JavaScript; with htmx the row is swapped in place)."""

from django.core.paginator import Paginator
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from ledger import selectors, services
from stateboard.errors import NotFound
from stateboard.policy import ANY, Policy, page

PER_PAGE = 50


@require_GET
@page(Policy(roles=ANY))
def notification_list(request):
    unread = request.GET.get("unread") == "1"
    page = Paginator(selectors.notifications_for(user=request.user, unread=unread), PER_PAGE).get_page(
        request.GET.get("page"))
    return render(request, "ledger/notification_list.html", {"page": page, "unread": unread})


@require_POST
@page(Policy(roles=ANY))
def notification_read(request, notification_id):
    try:
        notification = services.notification_read(notification_id=notification_id, user=request.user)
    except NotFound:
        raise Http404("No such notification of yours.")
    if request.htmx:
        return render(request, "ledger/notification_list.html#notification-row", {"notification": notification})
    back = reverse("ledger:notification_list")
    if request.POST.get("unread") == "1":
        back += "?unread=1"
    return redirect(back)
