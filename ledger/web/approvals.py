"""The approvals inbox as a decision desk: each request with its evidence pack, decided history."""

from django import forms
from django.contrib import messages
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import trigger_client_event

from ledger import authorizers, selectors, services
from ledger.domain.approval_rules import vote_of
from ledger.models import Approval
from ledger.web.common import approval_of_page, evidence_view, form_checked, inputs_diff
from ledger.web.forms import ReasonForm, RequiredReasonForm
from stateboard.policy import ANY, NOTIFICATIONS_CHANGED, Policy, page
from stateboard.roles import actor_for

HISTORY_ROWS = 50
PENDING_ROWS = 50  # each with its evidence pack: the soonest deadlines first


class HistoryFilterForm(forms.Form):
    status = forms.ChoiceField(required=False, choices=[("", "any status"), ("approved", "approved"),
                                                         ("rejected", "rejected"), ("expired", "expired")])
    kind = forms.ChoiceField(required=False, choices=[("", "any kind"), *Approval.Kind.choices])
    workflow = forms.ChoiceField(required=False)

    def __init__(self, data=None, *, workflows=(), **kwargs):
        super().__init__(data, **kwargs)
        self.fields["workflow"].choices = [("", "any workflow"), *((w.slug, w.slug) for w in workflows)]


def _with_packs(approvals: list, user) -> list:
    """Each request with its evidence pack, who may still decide it, and whether ``user`` voted (SPEC §17)."""
    packs = selectors.approval_packs(approvals=approvals)
    deciders = selectors.approval_deciders(approvals=approvals)
    actor = actor_for(user)
    for approval in approvals:
        pack = packs.get(approval.id, {})
        previous = pack.get("previous")
        approval.pack = {
            "effects": pack.get("effects", []),
            "evidence": [(event, [evidence_view(ev) for ev in event.evidence]) for event in pack.get("evidence", [])],
            "previous": previous,
            "changes": inputs_diff(previous.inputs, approval.run.inputs) if previous else None,
        }
        approval.deciders = deciders.get(approval.id)
        approval.voted = vote_of(approval.votes, actor) is not None
    return approvals


def inbox_context(request) -> dict:
    """Pending requests (with packs) and the filtered decided history; page and fragments share it."""
    history_form = HistoryFilterForm(request.GET or None, workflows=selectors.workflow_list())
    filters = history_form.cleaned_data if history_form.is_valid() else {}
    pending = _with_packs(list(selectors.approvals_pending()[:PENDING_ROWS]), request.user)
    history = list(selectors.approvals_decided(status=filters.get("status", ""), kind=filters.get("kind", ""),
                                               workflow=filters.get("workflow", ""))[:HISTORY_ROWS])
    total = len(pending) if len(pending) < PENDING_ROWS else selectors.approvals_pending_count()
    return {"approvals": pending, "pending_total": total, "history": history, "history_form": history_form,
            "query": request.GET.urlencode()}


@require_GET
@page(Policy(roles=ANY))
def approval_list(request):
    """Pending requests with their evidence, and decided history; htmx (poll, filters) gets the sections."""
    if request.htmx:
        section = "approval-history" if request.GET.get("section") == "history" else "approval-table"
        template = f"ledger/approval_list.html#{section}"
    else:
        template = "ledger/approval_list.html"
    return render(request, template, inbox_context(request))


def _approval_decide(request, approval_id, *, approve: bool):
    inbox = reverse("ledger:approval_list")
    form = form_checked((ReasonForm if approve else RequiredReasonForm)(request.POST))
    approval = services.approval_decide(approval_id=approval_id, user=request.user, approve=approve,
                                        reason=form.reason_text())
    approval = selectors.approval_get(approval_id=approval.id)
    if not request.htmx:
        if approval.kind == Approval.Kind.ESCALATION:  # on-call's words, as /oncall/ says them
            done = {"approved": "retried", "rejected": "abandoned"}.get(approval.status, approval.status)
            messages.success(request, f"Escalated run {approval.run.workflow.slug} · {approval.run.intent}: {done}.")
        else:
            status = approval.status if approval.status != "pending" else \
                f"pending: your vote is in, {len(approval.votes)} of {approval.quorum} approvals"
            messages.success(request, f"Request {approval.stage or approval.kind} of {approval.run.workflow.slug} "
                                      f"· {approval.run.intent} is {status}.")
        return redirect(inbox)
    response = render(request, "ledger/approval_list.html#approval-row",
                      {"approval": _with_packs([approval], request.user)[0]})
    trigger_client_event(response, "approval-changed", {"id": str(approval.id), "status": approval.status})
    return trigger_client_event(response, NOTIFICATIONS_CHANGED)  # deciding it settled its notifications


def _decide(action: str) -> Policy:
    return Policy(roles=ANY, authorizer=authorizers.may_decide_approval, subject=approval_of_page, audit=action,
                  audit_all=True)


@require_POST
@page(_decide("approve"), back="ledger:approval_list")
def approval_approve(request, approval_id):
    return _approval_decide(request, approval_id, approve=True)


@require_POST
@page(_decide("reject"), back="ledger:approval_list")
def approval_reject(request, approval_id):
    return _approval_decide(request, approval_id, approve=False)
