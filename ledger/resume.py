"""The resume packet (SPEC §9.2): what an agent reads when a run starts, instead of chat history.

A read: it writes nothing. The decision, stages and effects are always in it; facts and leads from
the workflow's knowledge scope fill the rest of the token budget (leads dropped first, the
longest-stale first; then facts, the oldest observed first).
"""

from __future__ import annotations

import json
import math
from datetime import datetime
from datetime import timezone as dt_timezone

from django.utils import timezone

from knowledge import selectors as knowledge_selectors
from ledger import effects, recovery
from ledger.models import Effect, Goal, Run
from ledger.selectors import checkpoint_latest
from stateboard.errors import Invalid

BUDGET_DEFAULT, BUDGET_MIN, BUDGET_MAX = 2000, 200, 100_000
RULES = [
    "Old claims are leads, not facts.",
    "Nothing counts as published without a verified effect.",
    "Answer 'no action' when the evidence is insufficient.",
    "Propose, never write.",
]


def _iso(value: datetime | None) -> str | None:
    return value.astimezone(dt_timezone.utc).isoformat().replace("+00:00", "Z") if value else None


def _size(value) -> int:
    """UTF-8 bytes of the compact JSON, as the API renders it."""
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


def approx_tokens(size_bytes: int) -> int:
    return math.ceil(size_bytes / 4)


def _effect_item(effect: Effect) -> dict:
    return {"stage": effect.stage, "idempotency_key": effect.idempotency_key, "system": effect.system,
            "operation": effect.operation, "reference": effect.reference,
            "verified_at": _iso(effect.updated_at) if effect.status == "verified" else None}


def _goal(run: Run) -> dict:
    """The run's inputs and, when its intent has goal versions, the one it works under (SPEC §10.1)."""
    goal = {"inputs": run.inputs}
    if run.goal_version is not None:
        found = Goal.objects.filter(workflow_id=run.workflow_id, intent=run.intent, version=run.goal_version).first()
        if found is not None:
            goal.update(objective=found.objective, constraints=found.constraints, acceptance=found.acceptance)
    return goal


def _scoped_claims(run: Run, *, user, now: datetime) -> tuple[list[dict], list[dict]]:
    """(facts, leads) of the workflow's knowledge scope; an empty scope reads no claims."""
    scope = getattr(run.workflow, "knowledge_scope", None) or {}
    if not (scope.get("system") or scope.get("task")):
        return [], []
    facts, leads = [], []
    heads = knowledge_selectors.claims_live(user=user, system=scope.get("system") or None,
                                            task=scope.get("task") or None, now=now)
    for head in heads:
        claim = head.current
        use_as = knowledge_selectors.claim_use_as(claim, now=now, needs_review=head.needs_review)
        if use_as == "fact":
            facts.append({"key": claim.key, "statement": claim.statement, "source_refs": claim.source_refs,
                          "observed_at": _iso(claim.observed_at), "refresh_after": _iso(claim.refresh_after),
                          "version": claim.version})
        elif use_as == "lead":
            leads.append({"key": claim.key, "statement": claim.statement, "refresh_after": _iso(claim.refresh_after)})
    return facts, leads


def _fit(items: list[dict], room: int, *, oldest_first) -> tuple[list[dict], int]:
    """Drop items, oldest first, until the rest fits in ``room`` bytes; (kept, bytes used).
    An item costs its JSON and a comma (the first needs none, so this errs on the safe side)."""
    sizes = {id(item): _size(item) + 1 for item in items}
    used, dropped = sum(sizes.values()), set()
    for item in sorted(items, key=oldest_first):
        if used <= room:
            break
        used -= sizes[id(item)]
        dropped.add(id(item))
    return [item for item in items if id(item) not in dropped], used


def resume_packet(*, run: Run, user, budget_tokens: int = BUDGET_DEFAULT, now: datetime | None = None) -> dict:
    """The packet for ``run`` within ``budget_tokens`` (422 ``budget_too_small`` if its core does not fit)."""
    if isinstance(budget_tokens, bool) or not isinstance(budget_tokens, int) \
            or not BUDGET_MIN <= budget_tokens <= BUDGET_MAX:
        raise Invalid("invalid_budget", f"budget_tokens must be an integer from {BUDGET_MIN} to {BUDGET_MAX}.",
                      status_code=400)
    now = now or timezone.now()
    workflow = run.workflow
    spec = recovery.WorkflowSpec(tuple(workflow.stages), frozenset(workflow.effect_stages), workflow.max_retries)
    stages = []
    for stage in spec.stages:
        entry = (run.stage_states or {}).get(stage) or {}
        item = {"stage": stage, "status": entry.get("status") or "pending"}
        if entry.get("pointer"):
            item["pointer"] = entry["pointer"]
        stages.append(item)
    effect_rows = list(Effect.objects.filter(workflow_id=run.workflow_id, intent=run.intent,
                                             input_fingerprint=run.input_fingerprint).order_by("claimed_seq"))
    checkpoint = checkpoint_latest(run=run)
    pending = (checkpoint.payload or {}).get("pending_intents", []) if checkpoint is not None \
        and checkpoint.input_fingerprint == run.input_fingerprint else []
    packet = {
        "run": {"id": str(run.id), "workflow": workflow.slug, "intent": run.intent, "state": run.state,
                "staged": run.staged, "goal_version": run.goal_version},
        "decision": run.decision or {},
        "goal": _goal(run),
        "stages": stages,
        "verified_effects": [_effect_item(e) for e in effect_rows if e.status == "verified"],
        "effects_to_verify": [_effect_item(e) for e in effect_rows if e.status in effects.UNVERIFIED],
        "pending_intents": pending,
        "facts": [],
        "leads": [],
        "rules": RULES,
        "approx_tokens": 0,
        "omitted": {"facts": 0, "leads": 0},
    }
    facts, leads = _scoped_claims(run, user=user, now=now)
    # The core with room for the counters' widest values; then facts and leads fill what is left.
    core = _size({**packet, "approx_tokens": BUDGET_MAX, "omitted": {"facts": len(facts), "leads": len(leads)}})
    budget_bytes = budget_tokens * 4
    if core > budget_bytes:
        raise Invalid("budget_too_small", f"The decision, stages and effects alone need about "
                                          f"{approx_tokens(core)} tokens; ask for at least that many.",
                      needed_tokens=approx_tokens(core))
    room = budget_bytes - core
    fact_bytes = sum(_size(fact) + 1 for fact in facts)
    kept_leads, lead_bytes = _fit(leads, max(room - fact_bytes, 0), oldest_first=lambda x: x["refresh_after"] or "")
    kept_facts, _ = _fit(facts, room - lead_bytes, oldest_first=lambda x: x["observed_at"] or "")
    packet["facts"], packet["leads"] = kept_facts, kept_leads
    packet["omitted"] = {"facts": len(facts) - len(kept_facts), "leads": len(leads) - len(kept_leads)}
    packet["approx_tokens"] = approx_tokens(_size({**packet, "approx_tokens": BUDGET_MAX}))
    return packet
