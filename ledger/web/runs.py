"""Runs list (filters, search, saved views), id-prefix redirect and the live run page."""

from django.conf import settings
from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from knowledge import selectors as knowledge_selectors
from ledger import attempt_selectors, authorizers, selectors, services, stage_selectors
from ledger.models import Run, SavedView
from ledger.traces.context import trace_url
from ledger.web import drawing, preview
from ledger.web.common import CappedPaginator, attribute_filters, evidence_view, form_error_text
from ledger.web.forms import SavedViewForm
from stateboard.policy import ANY, Policy, page
from stateboard.redact import redact_json

RUNS_PER_PAGE = 50
EVENTS_PER_PAGE = 50


def _unknown_filters(form, attribute_errors=None) -> list[str]:
    """Filter values the run filter could not use (an unknown workflow or state, a date that does not
    parse, an ``attr.`` filter no attribute can match): said on the page; the rest of the filters still apply."""
    notes = [f"{detail} The filter is ignored." for details in (attribute_errors or {}).values() for detail in details]
    for name in form.errors:
        value = form.data.get(name, "")
        if name in ("workflow", "state", "group"):
            notes.append(f"There is no {name} “{value}”; the filter is ignored.")
        elif name in form.fields:
            notes.append(f"“{value}” is not a usable {form.fields[name].label or name}; the filter is ignored.")
    return notes


@require_GET
@page(Policy(roles=ANY))
def run_list(request):
    """Runs with filters and ``?q=`` search; htmx (filter changes and the 5 s poll) gets only the table."""
    run_filter = selectors.runs_filtered(request.GET)
    form = run_filter.form
    page = CappedPaginator(run_filter.qs, RUNS_PER_PAGE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    runs = stage_selectors.with_current_stage_time(page.object_list, now=timezone.now())
    context = {"form": form, "page": page, "runs": runs, "query": query.urlencode(),
               "attr_filters": attribute_filters(run_filter, query),
               "grouped": form.is_valid() and form.cleaned_data.get("group") == "attempts",
               "unknown": _unknown_filters(form, run_filter.attribute_errors) if request.GET else [],
               "saved_views": list(SavedView.objects.order_by("name")[:50]),
               "save_form": SavedViewForm(initial={"query": query.urlencode()})}
    template = "ledger/run_list.html#run-table" if request.htmx else "ledger/run_list.html"
    return render(request, template, context)


@require_POST
@page(Policy(roles=ANY, authorizer=authorizers.may_save_view))
def saved_view_create(request):
    """Save the current filters under a name the whole team sees (same name: replaced)."""
    form = SavedViewForm(request.POST)
    if not form.is_valid():
        messages.error(request, form_error_text(form))
        return redirect("ledger:run_list")
    view = services.saved_view_save(name=form.cleaned_data["name"], query=form.cleaned_data["query"],
                                    user=request.user)
    messages.success(request, f"Saved view “{view.name}”.")
    return redirect(view.url())


@require_GET
@page(Policy(roles=ANY))
def run_prefix(request, prefix):
    """``/runs/<prefix>/``: a unique id prefix (≥ 4 hex digits) redirects to the run."""
    found = selectors.run_by_prefix(prefix=prefix)
    if len(found) == 1:
        return redirect("ledger:run_detail", run_id=found[0])
    if not found:
        raise Http404(f"No run id starts with {prefix}.")
    return redirect(reverse("ledger:run_list") + f"?q={prefix}")


def _int_param(request, name):
    try:
        value = int(request.GET.get(name, ""))
        return value if value > 0 else None
    except ValueError:
        return None


def _with_evidence(events) -> list:
    for event in events:
        event.evidence_items = [evidence_view(ev) for ev in (event.evidence or [])]
    return events


def _keys_named(keys, effect_rows) -> list[dict]:
    """Effect keys as an operator reads them: ``{key, effect}``, the effect (its stage, system and
    operation) found among the intent's rows, or None for a key none of them has."""
    by_key = {e.idempotency_key: e for e in effect_rows}
    return [{"key": key, "effect": by_key.get(key)} for key in keys]


def run_page_context(run: Run, *, user, before: int | None = None, from_seq: int | None = None) -> dict:
    """Everything the run page shows, from one read of each source: the page, the live refresh and
    the older-events fragment all render from this, so every panel agrees with the run's state."""
    events = _with_evidence(selectors.run_events_page(run=run, before=before, from_seq=from_seq,
                                                      limit=EVENTS_PER_PAGE))
    oldest = events[-1].seq if events else None
    attempts = attempt_selectors.run_attempts(run=run)  # newest first
    position = next(i for i, a in enumerate(attempts) if a.id == run.id)
    previous = attempts[position + 1] if position + 1 < len(attempts) else None
    checkpoint = selectors.checkpoint_latest(run=run)
    transitions = selectors.run_transitions(run=run)
    # The intent's and fingerprint's effects, whichever attempt performed them: the same rows the stage
    # words, the resume packet and the rollback preview read, so no panel contradicts another.
    effect_rows = list(selectors.effects_of_intent(run=run))
    return {
        "run": run, "events": events, "before": before, "fragment": False,
        "anchor": from_seq or oldest or 1, "older_than": oldest if oldest and oldest > 1 else None,
        "live": not run.is_terminal and before is None,
        "decision": run.decision or {},
        "to_verify": _keys_named(((run.decision or {}).get("verify_effects") or []), effect_rows),
        "path": drawing.run_path(transitions, run.state),
        "machine": drawing.machine_table(transitions, run.state),
        "timeline": drawing.stage_timeline(run, selectors.run_stage_events(run=run), effect_rows, now=timezone.now()),
        "attempts": attempts, "previous_attempt": previous,
        "effects": effect_rows, "approvals": list(run.approvals.all()),
        "packets": knowledge_selectors.packets_served(run_id=run.id, user=user),
        "checkpoint": checkpoint,
        "checkpoint_json": redact_json(checkpoint.payload) if checkpoint else "",
        "inputs_json": redact_json(run.inputs),
        "audit_entries": list(selectors.run_audit_entries(run=run)[:100]),
        "trace_url": trace_url(run, settings.STATEBOARD_TRACE_URL),
    }


def desk_context(run: Run, *, path: str) -> dict:
    """The on-call desk of a run that waits for on-call (SPEC §15): each action that applies with the
    on-call page's preview of it, and the failure that escalated the intent. Empty otherwise."""
    if not run.oncall_actions:
        return {}
    return {"desk": {"actions": [{"action": action, **preview.action_preview(run, action)}
                                 for action in run.oncall_actions],
                     "failure": attempt_selectors.escalating_failure(run=run), "next": path}}


@require_GET
@page(Policy(roles=ANY))
def run_detail(request, run_id):
    """Run page. While the run is not terminal one htmx poll re-renders every panel (``#run-live``);
    ``?before=<seq>`` is the next page of older events (a fragment with htmx, the page without)."""
    try:
        run = selectors.run_detail(run_id=run_id)
    except Run.DoesNotExist:
        raise Http404("No such run.")
    before = _int_param(request, "before")
    context = run_page_context(run, user=request.user, before=before, from_seq=_int_param(request, "from") if request.htmx else None)
    if request.htmx:
        context["fragment"] = bool(before)
        template = "ledger/run_detail.html#older-events" if before else "ledger/run_detail.html#run-live"
    else:
        context.update(desk_context(run, path=request.path))
        template = "ledger/run_detail.html"
    return render(request, template, context)


