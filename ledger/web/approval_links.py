"""An e-mailed request's Approve or Reject link (SPEC §17): a page where its addressee confirms. A GET
decides nothing; the POST decides through ``services.approval_link_decide`` (the inbox's service and rules,
``via: email``). A link that is no longer usable shows why."""

from django.contrib import messages
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from ledger import authorizers, services
from ledger.approval_links import ApprovalLink, approval_link_problem, approval_link_read
from ledger.web.common import form_checked
from ledger.web.forms import ReasonForm, RequiredReasonForm
from stateboard.policy import ANY, Policy, page


def approval_link_of_page(request, kwargs) -> ApprovalLink:
    """The genuine link of the path (read once per request), else 400 ``approval_link_invalid``."""
    if getattr(request, "approval_link", None) is None:
        request.approval_link = approval_link_read(kwargs["token"], approval_id=kwargs["approval_id"])
    return request.approval_link


def _back(request) -> str:
    """A refused confirmation comes back to its link (which says what changed); a refused look, to the inbox."""
    return request.path if request.method == "POST" else reverse("ledger:approval_list")


@require_http_methods(["GET", "POST"])
@page(Policy(roles=ANY, authorizer=authorizers.may_use_approval_link, subject=approval_link_of_page,
             audit="approval_link", audit_all=True), back=_back)
def approval_link(request, approval_id, token):
    link = approval_link_of_page(request, {"approval_id": approval_id, "token": token})
    problem = approval_link_problem(link)
    if problem is not None:
        return render(request, "ledger/approval_link.html", {"link": link, "problem": problem}, status=410)
    if request.method == "POST":
        form = form_checked((ReasonForm if link.verb == "approve" else RequiredReasonForm)(request.POST))
        approval = services.approval_link_decide(link=link, user=request.user, reason=form.reason_text())
        run = link.approval.run
        messages.success(request, f"{link.label}: done, from the e-mail. The request for "
                                  f"{approval.stage or approval.kind} of {run.workflow.slug} · {run.intent} "
                                  f"is {approval.status}.")
        return redirect("ledger:run_detail", run_id=run.id)
    return render(request, "ledger/approval_link.html", {"link": link, "problem": None})
