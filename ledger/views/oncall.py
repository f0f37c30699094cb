"""On-call: failed, escalated and compensating runs; retry / compensate / abandon, one or in bulk,
with a preview of what each would do before it is done."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, QueryDict
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import trigger_client_event

from ledger import preview, selectors, services
from ledger.forms import BulkActionForm, OncallFilterForm, PreviewForm, ReasonForm, RequiredReasonForm
from ledger.models import Run
from ledger.views.common import form_error_text, refused, safe_next
from stateboard.errors import DomainError
from stateboard.roles import ONCALL, has_role

WAITS_FOR_AGENT = ("fresh", "resume", "verify_only")


def _oncall_context(request, params) -> dict:
    """Page and fragments share this; ``params`` holds the filters (GET, or the bulk POST's copy of them)."""
    form = OncallFilterForm(params or None, workflows=selectors.workflow_list(user=request.user))
    filters = form.filters() if form.is_valid() else {}
    runs = list(selectors.oncall_runs(user=request.user, **filters)[:200])
    query = QueryDict(mutable=True)
    for name in form.fields:
        if params.get(name):
            query[name] = params[name]
    next_url = reverse("ledger:oncall") + (f"?{query.urlencode()}" if query else "")
    waiting = any(r.state in ("escalated", "compensate") for r in runs)
    return {"form": form, "runs": runs, "query": query.urlencode(), "next_url": next_url, "poll": waiting}


@require_GET
@login_required
def oncall(request):
    """Failed, escalated and awaiting-compensation runs; on-call may retry, compensate or abandon."""
    template = "ledger/oncall.html#oncall-table" if request.htmx else "ledger/oncall.html"
    return render(request, template, _oncall_context(request, request.GET))


@require_GET
@login_required
def oncall_preview(request):
    """What the action would do to each selected run (the retry decision, effects verified vs executed)."""
    form = PreviewForm(request.GET)
    if not form.is_valid():
        if request.htmx:
            return refused(request, message=form_error_text(form), status=422, redirect_to=reverse("ledger:oncall"),
                           action="preview", code="invalid_input")
        messages.error(request, form_error_text(form))
        return redirect("ledger:oncall")
    action = form.cleaned_data["action"]
    runs = {r.id: r for r in selectors.run_list(user=request.user).filter(id__in=form.cleaned_data["run"])}
    rows = [{"run": runs[run_id], **preview.action_preview(runs[run_id], action)}
            for run_id in form.cleaned_data["run"] if run_id in runs]
    context = {"action": action, "rows": rows, "reason": form.cleaned_data.get("reason") or "",
               "applies": [row["run"] for row in rows if row["applies"]],
               "next_url": safe_next(request, reverse("ledger:oncall")),
               "totals": {"verify": sum(len(r.get("verify", [])) for r in rows),
                          "execute": sum(len(r.get("execute", [])) for r in rows)}}
    template = "ledger/oncall_preview.html#oncall-preview" if request.htmx else "ledger/oncall_preview.html"
    return render(request, template, context)


def _run_action(run_id, *, action: str, user, reason: str):
    if action == "retry":
        return services.run_retry(run_id=run_id, user=user, reason=reason)
    if action == "compensate":
        return services.run_compensate(run_id=run_id, user=user, reason=reason)[0]
    return services.run_abandon(run_id=run_id, user=user, reason=reason)


def done_message(action: str, run) -> str:
    text = f"{action.title()}: {run.workflow.slug} · {run.intent} is now {run.state}"
    if action == "retry" and run.state in WAITS_FOR_AGENT:
        text += "; it waits for an agent to lease it"
    return text + "."


def _oncall_action(request, run_id, action: str):
    back = safe_next(request, reverse("ledger:oncall"))
    try:
        run = selectors.run_list(user=request.user).get(id=run_id)
    except Run.DoesNotExist:
        raise Http404("No such run.")
    form = (RequiredReasonForm if action == "abandon" else ReasonForm)(request.POST)
    reason = (request.POST.get("reason") or "")[:2000]
    refuse = dict(redirect_to=back, action=action, run_id=run.id, target=str(run.id), reason=reason)
    if not has_role(request.user, ONCALL):
        return refused(request, message="Only on-call may retry, compensate or abandon runs.", status=403,
                       code="permission_denied", **refuse)
    if not form.is_valid():
        return refused(request, message=form_error_text(form), status=422, code="invalid_input", **refuse)
    try:
        _run_action(run.id, action=action, user=request.user, reason=form.reason_text())
    except DomainError as exc:
        return refused(request, message=exc.detail, status=exc.status_code, code=exc.code, **refuse)
    run = selectors.oncall_run(run_id=run.id, user=request.user)
    if not request.htmx:
        messages.success(request, done_message(action, run))
        return redirect(back)
    response = render(request, "ledger/oncall.html#oncall-row",
                      {"run": run, "changed": action, "changed_text": done_message(action, run), "next_url": back})
    return trigger_client_event(response, "run-changed", {"id": str(run.id), "state": run.state})


@require_POST
@login_required
def run_retry(request, run_id):
    return _oncall_action(request, run_id, "retry")


@require_POST
@login_required
def run_compensate(request, run_id):
    return _oncall_action(request, run_id, "compensate")


@require_POST
@login_required
def run_abandon(request, run_id):
    return _oncall_action(request, run_id, "abandon")


@require_POST
@login_required
def oncall_bulk(request):
    """One POST for the selected runs of the filtered set; each run is decided on its own."""
    back = safe_next(request, reverse("ledger:oncall"))
    form = BulkActionForm(request.POST)
    action = request.POST.get("action", "")[:40] or "bulk"
    reason = (request.POST.get("reason") or "")[:2000]
    if not has_role(request.user, ONCALL):
        return refused(request, message="Only on-call may retry, compensate or abandon runs.", status=403,
                       action=f"bulk_{action}", code="permission_denied", redirect_to=back, reason=reason)
    if not form.is_valid():
        return refused(request, message=form_error_text(form), status=422, action=f"bulk_{action}",
                       code="invalid_input", redirect_to=back, reason=reason)
    action, reason = form.cleaned_data["action"], (form.cleaned_data["reason"] or "").strip()
    wanted = form.cleaned_data["run"]
    runs = {r.id: r for r in selectors.oncall_runs(user=request.user).filter(id__in=wanted)}
    done, refusals = [], []
    for run_id in wanted:
        run = runs.get(run_id)
        if run is None:
            refusals.append((str(run_id)[:8], "not a failed, escalated or compensating run"))
            continue
        try:
            _run_action(run_id, action=action, user=request.user, reason=reason)
            done.append(run)
        except DomainError as exc:
            services.audit_record(user=request.user, action=action, outcome="refused", run_id=run_id,
                                  target=str(run_id), code=exc.code, reason=reason)
            refusals.append((f"{run.workflow.slug} · {run.intent}", exc.detail))
    summary = f"{action.title()}: {len(done)} done, {len(refusals)} refused."
    if action == "retry" and done:
        summary += " Retried runs now wait for an agent."
    if not request.htmx:
        (messages.success if not refusals else messages.warning)(request, summary)
        for label, detail in refusals:
            messages.error(request, f"{label}: {detail}")
        return redirect(back)
    # The bulk form includes the filter form (hx-include), so the table comes back for the same filters.
    context = {**_oncall_context(request, request.POST), "bulk_summary": summary, "bulk_refused": refusals}
    response = render(request, "ledger/oncall.html#oncall-table", context)
    return trigger_client_event(response, "run-changed", {"bulk": action, "done": len(done)})
