"""On-call: failed, escalated and compensating runs; retry / compensate / abandon, one or in bulk,
with a preview of what each would do before it is done."""

from django.contrib import messages
from django.http import QueryDict
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import trigger_client_event

from ledger import attempt_selectors, authorizers, selectors, services, stage_selectors
from ledger.domain.machine import NEEDS_HUMAN_STATES
from ledger.web import preview
from ledger.web.common import attribute_filters, form_checked, run_of_page
from ledger.web.forms import BulkActionForm, PreviewForm, ReasonForm, RequiredReasonForm
from stateboard.policy import ANY, NOTIFICATIONS_CHANGED, Policy, page, safe_next

WAITS_FOR_AGENT = ("fresh", "resume", "verify_only")


NOW_ROWS, HISTORY_ROWS = 200, 50


def _oncall_context(request, params) -> dict:
    """Page and fragments share this; ``params`` holds the filters (GET, or the bulk POST's copy of them).

    What needs on-call now (escalated, compensate) comes apart from history (failed runs, which the
    next trigger decides); a failed run whose intent a later run completed is superseded and hidden
    unless ``superseded=1``."""
    run_filter = selectors.oncall_runs(params)
    form = run_filter.form
    with_superseded = params.get("superseded") == "1"
    runs = list(run_filter.qs.filter(state__in=NEEDS_HUMAN_STATES)[:NOW_ROWS])
    failed = run_filter.qs.filter(state="failed")
    history = list((failed if with_superseded else failed.filter(superseded_by__isnull=True))[:HISTORY_ROWS])
    stage_selectors.with_current_stage_time([*runs, *history], now=timezone.now())
    attempt_selectors.with_failures(runs)  # what escalated each: the newest failed attempt's text
    query = QueryDict(mutable=True)
    for name in [*form.fields, "superseded"]:
        if params.get(name):
            query[name] = params[name]
    for name, value in run_filter.attribute_params:  # attr.<key>=<value> (SPEC §15), each kept
        query.appendlist(name, value)
    next_url = reverse("ledger:oncall") + (f"?{query.urlencode()}" if query else "")
    return {"form": form, "runs": runs, "attr_filters": attribute_filters(run_filter, query), "history": history,
            "with_superseded": with_superseded,
            "history_rows": HISTORY_ROWS, "needs": selectors.needs_human(user=request.user),
            "query": query.urlencode(), "next_url": next_url, "poll": bool(runs)}


@require_GET
@page(Policy(roles=ANY))
def oncall(request):
    """Failed, escalated and awaiting-compensation runs; on-call may retry, compensate or abandon."""
    template = "ledger/oncall.html#oncall-table" if request.htmx else "ledger/oncall.html"
    return render(request, template, _oncall_context(request, request.GET))


@require_GET
@page(Policy(roles=ANY), back="ledger:oncall")
def oncall_preview(request):
    """What the action would do to each selected run (the retry decision, effects verified vs executed)."""
    form = form_checked(PreviewForm(request.GET))
    action = form.cleaned_data["action"]
    runs = {r.id: r for r in selectors.run_list().filter(id__in=form.cleaned_data["run"])}
    rows = [{"run": runs[run_id], **preview.action_preview(runs[run_id], action)}
            for run_id in form.cleaned_data["run"] if run_id in runs]
    context = {"action": action, "rows": rows, "reason": form.cleaned_data.get("reason") or "",
               "applies": [row["run"] for row in rows if row["applies"]],
               "next_url": safe_next(request, reverse("ledger:oncall")),
               "totals": {"verify": sum(len(r.get("verify", [])) for r in rows),
                          "execute": sum(len(r.get("execute", [])) for r in rows)}}
    template = "ledger/oncall_preview.html#oncall-preview" if request.htmx else "ledger/oncall_preview.html"
    return render(request, template, context)


def _oncall_back(request) -> str:
    return safe_next(request, reverse("ledger:oncall"))


def done_message(action: str, run) -> str:
    text = f"{action.title()}: {run.workflow.slug} · {run.intent} is now {run.state}"
    if action == "retry" and run.state in WAITS_FOR_AGENT:
        text += "; it waits for an agent to lease it"
    return text + "."


def _oncall_action(request, run_id, action: str):
    back = _oncall_back(request)
    form = form_checked((RequiredReasonForm if action == "abandon" else ReasonForm)(request.POST))
    services.run_act(action=action, run_id=run_id, user=request.user, reason=form.reason_text())
    run = selectors.oncall_run(run_id=run_id)
    if not request.htmx:
        messages.success(request, done_message(action, run))
        return redirect(back)
    response = render(request, "ledger/oncall.html#oncall-row",
                      {"run": run, "changed": action, "changed_text": done_message(action, run), "next_url": back})
    trigger_client_event(response, "run-changed", {"id": str(run.id), "state": run.state})
    return trigger_client_event(response, NOTIFICATIONS_CHANGED)  # the escalation's notifications are settled


def _oncall_view(action: str, authorizer):
    """Retry, compensate and abandon one run: one view, each action with its own authorizer and audit."""

    @require_POST
    @page(Policy(roles=ANY, authorizer=authorizer, subject=run_of_page, audit=action, audit_all=True),
          back=_oncall_back)
    def view(request, run_id):
        return _oncall_action(request, run_id, action)

    view.__name__ = view.__qualname__ = f"run_{action}"
    return view


run_retry = _oncall_view("retry", authorizers.may_retry)
run_compensate = _oncall_view("compensate", authorizers.may_compensate)
run_abandon = _oncall_view("abandon", authorizers.may_abandon)


def _bulk_action_of(request, kwargs) -> str:
    return request.POST.get("action", "")


@require_POST
@page(Policy(roles=ANY, authorizer=authorizers.may_act_in_bulk, subject=_bulk_action_of, audit="oncall_bulk",
             audit_all=True), back=_oncall_back)
def oncall_bulk(request):
    """One POST for the selected runs of the filtered set (the filters, ``attr.<key>=`` too, come with it:
    a selected run that no longer matches them is refused); each run is decided on its own."""
    back = _oncall_back(request)
    form = form_checked(BulkActionForm(request.POST))
    action, reason = form.cleaned_data["action"], (form.cleaned_data["reason"] or "").strip()
    wanted = form.cleaned_data["run"]
    runs = {r.id: r for r in selectors.oncall_runs(request.POST).qs.filter(id__in=wanted)}
    done, refusals = services.runs_act_in_bulk(action=action, run_ids=[i for i in wanted if i in runs],
                                               user=request.user, reason=reason)
    refused = []
    for run_id in wanted:
        if run_id not in runs:
            refused.append((str(run_id)[:8], "not a failed, escalated or compensating run of these filters"))
        elif run_id in refusals:
            refused.append((f"{runs[run_id].workflow.slug} · {runs[run_id].intent}", refusals[run_id].detail))
    summary = f"{action.title()}: {len(done)} done, {len(refused)} refused."
    if action == "retry" and done:
        summary += " Retried runs now wait for an agent."
    if not request.htmx:
        (messages.success if not refused else messages.warning)(request, summary)
        for label, detail in refused:
            messages.error(request, f"{label}: {detail}")
        return redirect(back)
    # The bulk form includes the filter form (hx-include), so the table comes back for the same filters.
    context = {**_oncall_context(request, request.POST), "bulk_summary": summary, "bulk_refused": refused}
    response = render(request, "ledger/oncall.html#oncall-table", context)
    trigger_client_event(response, "run-changed", {"bulk": action, "done": len(done)})
    return trigger_client_event(response, NOTIFICATIONS_CHANGED)
