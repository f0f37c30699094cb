"""The approvals inbox as a decision desk: each request with its evidence pack, decided history."""

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import trigger_client_event

from ledger import selectors, services
from ledger.forms import ReasonForm, RequiredReasonForm
from ledger.models import Approval
from ledger.views.common import evidence_view, form_error_text, inputs_diff, refused
from stateboard.errors import DomainError
from stateboard.roles import EDITOR, ONCALL, has_role

HISTORY_ROWS = 50


class HistoryFilterForm(forms.Form):
    status = forms.ChoiceField(required=False, choices=[("", "any status"), ("approved", "approved"),
                                                         ("rejected", "rejected"), ("expired", "expired")])
    kind = forms.ChoiceField(required=False, choices=[("", "any kind"), *Approval.Kind.choices])
    workflow = forms.ChoiceField(required=False)

    def __init__(self, data=None, *, workflows=(), **kwargs):
        super().__init__(data, **kwargs)
        self.fields["workflow"].choices = [("", "any workflow"), *((w.slug, w.slug) for w in workflows)]


def _approval_roles(approval: Approval) -> tuple[str, ...]:
    return (ONCALL,) if approval.kind == Approval.Kind.ESCALATION else (EDITOR,)


def _with_packs(approvals: list) -> list:
    packs = selectors.approval_packs(approvals=approvals)
    for approval in approvals:
        pack = packs.get(approval.id, {})
        previous = pack.get("previous")
        approval.pack = {
            "effects": pack.get("effects", []),
            "evidence": [(event, [evidence_view(ev) for ev in event.evidence]) for event in pack.get("evidence", [])],
            "previous": previous,
            "changes": inputs_diff(previous.inputs, approval.run.inputs) if previous else None,
        }
    return approvals


def inbox_context(request) -> dict:
    """Pending requests (with packs) and the filtered decided history; page and fragments share it."""
    user = request.user
    history_form = HistoryFilterForm(request.GET or None, workflows=selectors.workflow_list(user=user))
    filters = history_form.cleaned_data if history_form.is_valid() else {}
    pending = _with_packs(list(selectors.approvals_pending(user=user)[:200]))
    history = list(selectors.approvals_decided(user=user, status=filters.get("status", ""),
                                               kind=filters.get("kind", ""),
                                               workflow=filters.get("workflow", ""))[:HISTORY_ROWS])
    return {"approvals": pending, "history": history, "history_form": history_form,
            "query": request.GET.urlencode()}


@require_GET
@login_required
def approval_list(request):
    """Pending requests with their evidence, and decided history; htmx (poll, filters) gets the sections."""
    if request.htmx:
        section = "approval-history" if request.GET.get("section") == "history" else "approval-table"
        template = f"ledger/approval_list.html#{section}"
    else:
        template = "ledger/approval_list.html"
    return render(request, template, inbox_context(request))


def _approval_decide(request, approval_id, *, approve: bool):
    verb = "approve" if approve else "reject"
    inbox = reverse("ledger:approval_list")
    try:
        approval = selectors.approval_get(approval_id=approval_id, user=request.user)
    except Approval.DoesNotExist:
        raise Http404("No such approval request.")
    form = (ReasonForm if approve else RequiredReasonForm)(request.POST)
    reason = (request.POST.get("reason") or "")[:2000]
    refuse = dict(redirect_to=inbox, action=verb, run_id=approval.run_id, target=str(approval.id), reason=reason)
    allowed = _approval_roles(approval)
    if not has_role(request.user, *allowed):
        return refused(request, message=f"Only {'/'.join(allowed)} may {verb} {approval.get_kind_display()} "
                                        "requests.", status=403, code="permission_denied", **refuse)
    if not form.is_valid():
        return refused(request, message=form_error_text(form), status=422, code="invalid_input", **refuse)
    try:
        approval = services.approval_decide(approval_id=approval.id, user=request.user, approve=approve,
                                            reason=form.reason_text())
    except DomainError as exc:
        return refused(request, message=exc.detail, status=exc.status_code, code=exc.code, **refuse)
    approval = selectors.approval_get(approval_id=approval.id, user=request.user)
    if not request.htmx:
        messages.success(request, f"Request {approval.stage or approval.kind} of {approval.run.workflow.slug} "
                                  f"· {approval.run.intent} is {approval.status}.")
        return redirect(inbox)
    response = render(request, "ledger/approval_list.html#approval-row", {"approval": _with_packs([approval])[0]})
    return trigger_client_event(response, "approval-changed", {"id": str(approval.id), "status": approval.status})


@require_POST
@login_required
def approval_approve(request, approval_id):
    return _approval_decide(request, approval_id, approve=True)


@require_POST
@login_required
def approval_reject(request, approval_id):
    return _approval_decide(request, approval_id, approve=False)
