"""Run page panel (SPEC §10): goal version and history, staged badge and "would do" effects, rollback.

A separate partial (``ledger/partials/run_goal_rollback.html``) with its own context function, so
the run page includes it with ``{% include "ledger/partials/run_goal_rollback.html" %}`` given
``goal_rollback_context(run, user)``, or loads it with htmx from ``ledger:run_goal_rollback``.
"""

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from ledger import authorizers, services
from ledger.domain.machine import ROLLBACK_STATES
from ledger.models import LedgerEvent, Run
from ledger.web.common import run_of_page, run_or_404
from stateboard.policy import ANY, Policy, page
from stateboard.roles import allowed

PARTIAL = "ledger/partials/run_goal_rollback.html"


def goal_rollback_context(run: Run, user, to_stage: str | None = None) -> dict:
    """Everything the panel shows, from the run and its intent's goal versions."""
    goals = list(services.goals_of(workflow=run.workflow, intent=run.intent)[:20])
    would_do = []
    if run.staged:  # the effects a staged run would have had: its succeeded events on effect stages
        would_do = list(LedgerEvent.objects.of_run(run).filter(kind="succeeded", stage__in=run.workflow.effect_stages)
                        .order_by("seq").values("stage", "effect", "seq"))
    can_roll_back = allowed(authorizers.may_rollback, user, run) and not run.staged and run.state in ROLLBACK_STATES
    stages = list(run.workflow.stages)
    to_stage = to_stage if to_stage in stages else next((s for s in stages if s in run.workflow.effect_stages),
                                                        stages[0] if stages else None)
    preview = services.rollback_preview(run, to_stage) if can_roll_back and to_stage else None
    return {"run": run, "goals": goals, "current_goal": next((g for g in goals if g.version == run.goal_version), None),
            "goal_outdated": run.goal_outdated or (bool(goals) and goals[0].version != run.goal_version),
            "would_do": would_do, "can_roll_back": can_roll_back, "stages": stages, "to_stage": to_stage,
            "preview": preview}


@require_GET
@page(Policy(roles=ANY))
def run_goal_rollback(request, run_id):
    """The panel alone (htmx loads it; ``?to_stage=`` refreshes the rollback preview)."""
    run = run_or_404(run_id)
    template = PARTIAL if request.htmx else "ledger/run_goal_rollback.html"  # without JS: a whole page
    return render(request, template, goal_rollback_context(run, request.user, request.GET.get("to_stage")))


def _run_page(request) -> str:
    return reverse("ledger:run_detail", args=[request.resolver_match.kwargs["run_id"]])


@require_POST
@page(Policy(roles=ANY, authorizer=authorizers.may_rollback, subject=run_of_page, audit="rollback", audit_all=True),
      back=_run_page)
def run_rollback(request, run_id):
    """Roll the run back (on-call, owner): back to the run page with a message saying what happened (an
    htmx caller is sent there too: the panel alone would leave the rest of the page as it was)."""
    to_stage, reason = request.POST.get("to_stage", ""), (request.POST.get("reason") or "")[:2000]
    compensate = request.POST.get("compensate") in ("on", "true", "1")
    run = services.run_rollback(run_id=run_id, user=request.user, to_stage=to_stage, reason=reason,
                                compensate=compensate)
    reason_code = (run.decision or {}).get("reason_code", "")
    messages.success(request, f"Rolled back to {to_stage}: the run is {run.state}"
                              + (f" ({reason_code}), queued for an agent." if run.state == "resume"
                                 else ", waiting for the compensation's approval." if run.state == "compensate"
                                 else "."))
    if request.htmx:
        return HttpResponse(status=204, headers={"HX-Redirect": _run_page(request)})
    return redirect(_run_page(request))
