"""What an on-call action would do, before it is done (read-only).

A retry re-decides the run: the ``RecoveryInput`` that ``services.run_retry`` decides on
(``services.retry_input``), fed to the pure ``recovery.recovery_decide``. Nothing is written; the real
retry decides again at the time.
"""

from __future__ import annotations

from django.utils import timezone

from ledger import services
from ledger.domain import recovery
from ledger.models import Run


def retry_preview(run: Run, *, now=None) -> dict:
    """The decision a retry would take now, and how many effects it would verify versus execute."""
    now = now or timezone.now()
    others = services.holding_runs(workflow=run.workflow, intent=run.intent, exclude=run.id)
    inp, _ = services.retry_input(run, others=others, now=now)
    decision = recovery.recovery_decide(inp)
    effect_stages = [s for s in inp.workflow.stages if s in inp.workflow.effect_stages]
    verified_keys = set(decision.verify_effects)
    by_stage = {e.stage: e for e in inp.effects if e.status != "failed"}
    runs_stages = decision.outcome in ("fresh", "resume")
    done = {s for s, status in decision.stage_status.items() if recovery.stage_done(inp.workflow, s, status)}
    to_verify = [s for s in effect_stages if by_stage.get(s) and by_stage[s].key in verified_keys]
    to_execute = [s for s in effect_stages if runs_stages and s not in done and s not in to_verify]
    return {"decision": decision.as_dict(), "verify": to_verify, "execute": to_execute,
            "already_done": [s for s in effect_stages if s in done]}


def action_preview(run: Run, action: str) -> dict:
    """Per action: whether it applies to the run now, and what it would do."""
    refusal = services.oncall_refusal(action, run)
    if refusal:
        return {"applies": False, "why": refusal}
    if action == "retry":
        return {"applies": True, **retry_preview(run)}
    if action == "compensate":
        plan = services.compensation_plan(run)
        if plan is None:
            return {"applies": False, "why": "nothing to compensate deterministically"}
        return {"applies": True, "plan": plan}
    return {"applies": True, "final": True}
