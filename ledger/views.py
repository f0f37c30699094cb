"""HTML pages of the ledger: runs, run detail, approvals inbox, on-call.

Reads go through ``selectors``, writes through ``services``. Every action is a real POST that
works without JavaScript (redirect + message); with htmx it answers the changed partial, or the
refusal as plain text with its status code (``app.js`` shows it).
"""

import json

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, QueryDict
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import trigger_client_event

from ledger import authorizers, selectors, services
from ledger.forms import BulkActionForm, ReasonForm, RequiredReasonForm
from ledger.models import TERMINAL_STATES, Approval, Run
from stateboard.errors import DomainError, Invalid
from stateboard.refusals import approval_subject, refusal_record, refusals

RUNS_PER_PAGE = 50


# ---------------------------------------------------------------- helpers

def _form_checked(form):
    """The bound form, valid, or the refusal (422) the wrapper records and shows."""
    if not form.is_valid():
        raise Invalid("invalid_input", " ".join(str(e) for errors in form.errors.values() for e in errors))
    return form


def _safe_next(request, default: str) -> str:
    target = request.POST.get("next") or ""
    if target and url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()},
                                                  require_https=request.is_secure()):
        return target
    return default


# ---------------------------------------------------------------- state machine drawing

# SPEC §2 drawn on a grid (column, row); terminal states in the last column.
STATE_GRID = {
    "captured": (0, 0), "restore": (0, 1), "compare": (0, 2),
    "fresh": (1, 0), "resume": (1, 1), "verify_only": (1, 2), "noop": (1, 3), "escalated": (1, 4),
    "execute": (2, 0), "checkpointed": (2, 1), "awaiting_approval": (2, 2),
    "verify": (3, 1), "compensate": (3, 3),
    "completed": (4, 0), "failed": (4, 1), "compensated": (4, 3), "abandoned": (4, 4),
}
STATE_EDGES = [
    ("captured", "restore"), ("restore", "fresh"), ("restore", "compare"),
    ("compare", "fresh"), ("compare", "resume"), ("compare", "verify_only"), ("compare", "noop"),
    ("compare", "escalated"),
    ("fresh", "execute"), ("resume", "execute"), ("verify_only", "verify"),
    ("execute", "checkpointed"), ("execute", "failed"),
    ("checkpointed", "execute"), ("checkpointed", "completed"), ("checkpointed", "awaiting_approval"),
    ("checkpointed", "verify"),
    ("awaiting_approval", "execute"), ("awaiting_approval", "abandoned"),
    ("verify", "checkpointed"), ("verify", "completed"), ("verify", "compensate"),
    ("compensate", "compensated"), ("compensate", "escalated"),
    ("escalated", "restore"), ("escalated", "compensate"), ("escalated", "abandoned"),
]
_BAD_STATES = frozenset({"failed", "escalated", "abandoned"})
_GOOD_STATES = frozenset({"completed", "compensated", "noop"})
_COL_W, _ROW_H, _BOX_W, _BOX_H, _PAD = 185, 72, 132, 34, 24


def _centre(state: str) -> tuple[float, float]:
    col, row = STATE_GRID.get(state, (2, 3))
    return _PAD + col * _COL_W + _BOX_W / 2, _PAD + row * _ROW_H + _BOX_H / 2


def _edge_geometry(a: str, b: str, bend: float = 0.15) -> dict:
    """A gentle quadratic curve from box edge to box edge (opposite directions bend apart)."""
    (x1, y1), (x2, y2) = _centre(a), _centre(b)
    dx, dy = x2 - x1, y2 - y1
    length = max((dx * dx + dy * dy) ** 0.5, 1.0)
    ux, uy = dx / length, dy / length
    # Leave the boxes at their border, approximately.
    def inset(ux, uy):
        tx = (_BOX_W / 2) / abs(ux) if ux else float("inf")
        ty = (_BOX_H / 2) / abs(uy) if uy else float("inf")
        return min(tx, ty) + 3
    start, end = inset(ux, uy), inset(ux, uy) + 4
    sx, sy = x1 + ux * start, y1 + uy * start
    ex, ey = x2 - ux * end, y2 - uy * end
    offset = min(length * bend, 26.0) if length > 90 else 0.0  # short hops stay straight
    cx, cy = (sx + ex) / 2 - uy * offset, (sy + ey) / 2 + ux * offset
    mx, my = (sx + 2 * cx + ex) / 4, (sy + 2 * cy + ey) / 4
    return {"d": f"M{sx:.1f},{sy:.1f} Q{cx:.1f},{cy:.1f} {ex:.1f},{ey:.1f}", "mx": round(mx, 1), "my": round(my, 1)}


def state_machine(transitions: list[dict], current: str) -> dict:
    """Nodes and edges of the SPEC §2 diagram with the path this run took (from its transition events)."""
    path = ["captured"]
    taken: dict[tuple[str, str], list[int]] = {}
    for step, data in enumerate(transitions, start=1):
        a, b = data.get("from") or path[-1], data.get("to") or ""
        taken.setdefault((a, b), []).append(step)
        path.append(b)
    visited = set(path)
    nodes = []
    for state, (col, row) in STATE_GRID.items():
        nodes.append({
            "name": state, "x": _PAD + col * _COL_W, "y": _PAD + row * _ROW_H,
            "tx": _PAD + col * _COL_W + _BOX_W / 2, "ty": _PAD + row * _ROW_H + _BOX_H / 2 + 4,
            "visited": state in visited, "current": state == current, "terminal": state in TERMINAL_STATES,
            "tone": "bad" if state in _BAD_STATES else "good" if state in _GOOD_STATES else "",
        })
    edges = []
    for a, b in [*STATE_EDGES, *(pair for pair in taken if pair not in STATE_EDGES)]:
        if a not in STATE_GRID or b not in STATE_GRID:
            continue
        steps = taken.get((a, b), [])
        edges.append({"from": a, "to": b, "taken": bool(steps), "steps": ",".join(map(str, steps)),
                      **_edge_geometry(a, b)})
    edges.sort(key=lambda e: e["taken"])  # taken edges drawn last, on top
    return {
        "nodes": nodes, "edges": edges, "path": path,
        "width": _PAD * 2 + 4 * _COL_W + _BOX_W, "height": _PAD * 2 + 4 * _ROW_H + _BOX_H,
        "box_w": _BOX_W, "box_h": _BOX_H,
    }


# ---------------------------------------------------------------- runs

@require_GET
@login_required
def run_list(request):
    """Runs with filters; htmx (filter changes and the 5 s poll) gets only the table."""
    run_filter = selectors.runs_filtered(request.GET)
    form = run_filter.form
    page = Paginator(run_filter.qs, RUNS_PER_PAGE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    context = {"form": form, "page": page, "runs": page.object_list, "query": query.urlencode()}
    template = "ledger/run_list.html#run-table" if request.htmx else "ledger/run_list.html"
    return render(request, template, context)


def _run_detail_context(run: Run, *, partial: bool) -> dict:
    events = list(selectors.run_events(run=run))
    context = {"run": run, "events": events}
    if partial:
        return context
    workflow = run.workflow
    stage_states = run.stage_states or {}
    timeline = [{
        "stage": stage,
        "status": (stage_states.get(stage) or {}).get("status", "pending"),
        "pointer": (stage_states.get(stage) or {}).get("pointer", ""),
        "effect_stage": stage in workflow.effect_stages,
        "approval_stage": stage in workflow.approval_stages,
        "current": stage == run.current_stage and not run.is_terminal,
    } for stage in workflow.stages]
    checkpoint = selectors.checkpoint_latest(run=run)
    transitions = [e.data for e in events if e.kind == "transition" and isinstance(e.data, dict)]
    context.update({
        "decision": run.decision or {},
        "machine": state_machine(transitions, run.state),
        "timeline": timeline,
        "effects": list(run.effects.all()),
        "approvals": list(run.approvals.all()),
        "checkpoint": checkpoint,
        "checkpoint_json": json.dumps(checkpoint.payload, indent=2, sort_keys=True) if checkpoint else "",
        "inputs_json": json.dumps(run.inputs, indent=2, sort_keys=True),
        "audit_entries": list(selectors.run_audit_entries(run=run)[:100]),
    })
    return context


@require_GET
@login_required
def run_detail(request, run_id):
    """Run page; the htmx poll (every 3 s, only while the run is not terminal) refreshes the event list."""
    try:
        if request.htmx:  # the poll needs only the run and its events
            run = selectors.run_list().get(id=run_id)
        else:
            run = selectors.run_detail(run_id=run_id)
    except Run.DoesNotExist:
        raise Http404("No such run.")
    template = "ledger/run_detail.html#event-list" if request.htmx else "ledger/run_detail.html"
    return render(request, template, _run_detail_context(run, partial=bool(request.htmx)))


# ---------------------------------------------------------------- approvals

@require_GET
@login_required
def approval_list(request):
    """Pending requests; each row carries Approve / Reject for the roles that may decide it."""
    approvals = list(selectors.approvals_pending()[:200])
    template = "ledger/approval_list.html#approval-table" if request.htmx else "ledger/approval_list.html"
    return render(request, template, {"approvals": approvals})


def _approval_decide(request, approval_id, *, approve: bool):
    inbox = reverse("ledger:approval_list")
    try:
        approval = selectors.approval_get(approval_id=approval_id)
    except Approval.DoesNotExist:
        raise Http404("No such approval request.")
    authorizers.may_decide_approval(request.user, approval)
    form = _form_checked((ReasonForm if approve else RequiredReasonForm)(request.POST))
    approval = services.approval_decide(approval_id=approval.id, user=request.user, approve=approve,
                                        reason=form.reason_text())
    approval = selectors.approval_get(approval_id=approval.id)
    if not request.htmx:
        messages.success(request, f"Request {approval.stage or approval.kind} of {approval.run.workflow.slug} "
                                  f"· {approval.run.intent} is {approval.status}.")
        return redirect(inbox)
    response = render(request, "ledger/approval_list.html#approval-row", {"approval": approval})
    return trigger_client_event(response, "approval-changed", {"id": str(approval.id), "status": approval.status})


@require_POST
@login_required
@refusals("approve", subject=approval_subject, back="ledger:approval_list")
def approval_approve(request, approval_id):
    return _approval_decide(request, approval_id, approve=True)


@require_POST
@login_required
@refusals("reject", subject=approval_subject, back="ledger:approval_list")
def approval_reject(request, approval_id):
    return _approval_decide(request, approval_id, approve=False)


# ---------------------------------------------------------------- on-call

def _oncall_context(request, params) -> dict:
    """Page and fragments share this; ``params`` holds the filters (GET, or the bulk POST's copy of them)."""
    run_filter = selectors.oncall_runs(params)
    form = run_filter.form
    runs = list(run_filter.qs[:200])
    query = QueryDict(mutable=True)
    for name in form.fields:
        if params.get(name):
            query[name] = params[name]
    next_url = reverse("ledger:oncall") + (f"?{query.urlencode()}" if query else "")
    return {"form": form, "runs": runs, "query": query.urlencode(), "next_url": next_url}


@require_GET
@login_required
def oncall(request):
    """Failed, escalated and awaiting-compensation runs; on-call may retry, compensate or abandon."""
    template = "ledger/oncall.html#oncall-table" if request.htmx else "ledger/oncall.html"
    return render(request, template, _oncall_context(request, request.GET))


ONCALL_AUTHORIZERS = {"retry": authorizers.may_retry, "compensate": authorizers.may_compensate,
                      "abandon": authorizers.may_abandon}


def _oncall_back(request) -> str:
    return _safe_next(request, reverse("ledger:oncall"))


def _run_action(run_id, *, action: str, user, reason: str):
    if action == "retry":
        return services.run_retry(run_id=run_id, user=user, reason=reason)
    if action == "compensate":
        return services.run_compensate(run_id=run_id, user=user, reason=reason)[0]
    return services.run_abandon(run_id=run_id, user=user, reason=reason)


def _oncall_action(request, run_id, action: str):
    back = _oncall_back(request)
    try:
        run = selectors.run_list().get(id=run_id)
    except Run.DoesNotExist:
        raise Http404("No such run.")
    ONCALL_AUTHORIZERS[action](request.user, run)
    form = _form_checked((RequiredReasonForm if action == "abandon" else ReasonForm)(request.POST))
    _run_action(run.id, action=action, user=request.user, reason=form.reason_text())
    run = selectors.oncall_run(run_id=run.id)
    if not request.htmx:
        messages.success(request, f"{action.title()}: {run.workflow.slug} · {run.intent} is now {run.state}.")
        return redirect(back)
    response = render(request, "ledger/oncall.html#oncall-row", {"run": run, "changed": action, "next_url": back})
    return trigger_client_event(response, "run-changed", {"id": str(run.id), "state": run.state})


@require_POST
@login_required
@refusals("retry", back=_oncall_back)
def run_retry(request, run_id):
    return _oncall_action(request, run_id, "retry")


@require_POST
@login_required
@refusals("compensate", back=_oncall_back)
def run_compensate(request, run_id):
    return _oncall_action(request, run_id, "compensate")


@require_POST
@login_required
@refusals("abandon", back=_oncall_back)
def run_abandon(request, run_id):
    return _oncall_action(request, run_id, "abandon")


@require_POST
@login_required
def oncall_bulk(request):
    """One POST for the selected runs of the filtered set; each run is decided on its own."""
    action = request.POST.get("action", "")[:40] or "bulk"
    return refusals(f"bulk_{action}", back=_oncall_back)(_oncall_bulk)(request, action)


def _oncall_bulk(request, action: str):
    back = _oncall_back(request)
    ONCALL_AUTHORIZERS.get(action, authorizers.may_retry)(request.user, None)
    form = _form_checked(BulkActionForm(request.POST))
    action, reason = form.cleaned_data["action"], (form.cleaned_data["reason"] or "").strip()
    wanted = form.cleaned_data["run"]
    runs = {r.id: r for r in selectors.oncall_runs().qs.filter(id__in=wanted)}
    done, refused = [], []
    for run_id in wanted:
        run = runs.get(run_id)
        if run is None:
            refused.append((str(run_id)[:8], "not a failed, escalated or compensating run"))
            continue
        try:
            _run_action(run_id, action=action, user=request.user, reason=reason)
            done.append(run)
        except DomainError as exc:
            refusal_record(request.user, action=action, code=exc.code, run_id=run_id, target=str(run_id),
                           reason=reason)
            refused.append((f"{run.workflow.slug} · {run.intent}", exc.detail))
    summary = f"{action.title()}: {len(done)} done, {len(refused)} refused."
    if not request.htmx:
        (messages.success if not refused else messages.warning)(request, summary)
        for label, detail in refused:
            messages.error(request, f"{label}: {detail}")
        return redirect(back)
    # The bulk form includes the filter form (hx-include), so the table comes back for the same filters.
    context = {**_oncall_context(request, request.POST), "bulk_summary": summary, "bulk_refused": refused}
    response = render(request, "ledger/oncall.html#oncall-table", context)
    return trigger_client_event(response, "run-changed", {"bulk": action, "done": len(done)})
