"""The resume packet (SPEC §9.2): what an agent reads when a run starts, instead of chat history.

It changes nothing a decision reads: the decision, stages and effects are always in it; facts and
leads from the workflow's knowledge scope fill the rest of the token budget (leads dropped first,
the longest-stale first; then facts, the oldest observed first). Which claims it served, and which
it left out and why, is recorded once per reader and content (``knowledge.services.packet_served_record``)
for the run page and the claim's page.
"""

from __future__ import annotations

import json
import math
from datetime import datetime
from datetime import timezone as dt_timezone

from django.utils import timezone

from knowledge import selectors as knowledge_selectors
from knowledge import services as knowledge_services
from ledger import selectors
from ledger.domain import effects, recovery
from ledger.models import Effect, Goal, Run
from ledger.selectors import checkpoint_latest
from ledger.usage_selectors import earlier_attempts_spent
from stateboard.errors import Invalid
from stateboard.roles import actor_for

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


def _fact(claim) -> dict:
    return {"key": claim.key, "statement": claim.statement, "source_refs": claim.source_refs,
            "observed_at": _iso(claim.observed_at), "refresh_after": _iso(claim.refresh_after),
            "version": claim.version}


def _lead(claim) -> dict:
    return {"key": claim.key, "statement": claim.statement, "refresh_after": _iso(claim.refresh_after)}


def _scoped(run: Run, *, user, now: datetime, use_as: str):
    """The workflow's knowledge scope's live claims used as ``use_as``; None for an empty scope."""
    scope = getattr(run.workflow, "knowledge_scope", None) or {}
    if not (scope.get("system") or scope.get("task")):
        return None
    return knowledge_selectors.claims_live(user=user, system=scope.get("system") or None,
                                           task=scope.get("task") or None, use_as=use_as, now=now)


def _newest_that_fit(heads, *, newest_first: str, item, room: int, chunk: int = 64) -> tuple[list, int]:
    """Heads of ``heads``, newest first, while their items fit in ``room`` bytes: what dropping the oldest
    until the rest fits keeps, read a chunk at a time so a large scope is never read whole. An item costs
    its JSON and a comma (the first needs none, so this errs on the safe side). Returns [(head, item)]."""
    kept, used = [], 0
    if heads is None or room <= 0:
        return kept, used
    ordered = heads.order_by(newest_first, "key")
    for start in range(0, 10**9, chunk):
        page = list(ordered[start:start + chunk])
        for head in page:
            entry = item(head.current)
            cost = _size(entry) + 1
            if used + cost > room:
                return kept, used
            kept.append((head, entry))
            used += cost
        if len(page) < chunk:
            return kept, used
    return kept, used


FACTS_NEWEST, LEADS_NEWEST = "-current__observed_at", "-current__refresh_after"
LEFT_OUT_NAMED = 20  # over-budget claims named in the record (the packet counts them all)


def _over_budget(heads, *, newest_first: str, kept: int, total: int) -> list:
    """The first of the heads the budget dropped, as the record names them."""
    if heads is None or kept >= total:
        return []
    return list(heads.order_by(newest_first, "key")[kept:kept + LEFT_OUT_NAMED])


def _served_record(run: Run, *, user, now: datetime, budget_tokens: int, packet: dict, facts, leads,
                   dropped, scope: dict) -> None:
    """Which claims the packet served, as facts and leads, and which it left out and why."""
    claims = [(h.key, h.current.version, "fact", "") for h, _ in facts]
    claims += [(h.key, h.current.version, "lead",
                "needs_review" if getattr(h, "needs_review", False) else "stale") for h, _ in leads]
    claims += [(h.key, h.current.version, "left_out", "over_budget") for h in dropped]
    claims += [(key, version, "left_out", reason) for key, version, reason in knowledge_selectors.claims_left_out(
        user=user, system=scope.get("system") or None, task=scope.get("task") or None)]
    knowledge_services.packet_served_record(
        run_id=run.id, served_to=actor_for(user), at=now, budget_tokens=budget_tokens,
        approx_tokens=packet["approx_tokens"], omitted=packet["omitted"], claims=claims)


def resume_packet(*, run: Run, user, budget_tokens: int = BUDGET_DEFAULT, now: datetime | None = None) -> dict:
    """The packet for ``run`` within ``budget_tokens`` (422 ``budget_too_small`` if its core does not fit)."""
    if isinstance(budget_tokens, bool) or not isinstance(budget_tokens, int) \
            or not BUDGET_MIN <= budget_tokens <= BUDGET_MAX:
        raise Invalid("invalid_budget", f"budget_tokens must be an integer from {BUDGET_MIN} to {BUDGET_MAX}.",
                      status_code=400)
    now = now or timezone.now()
    workflow = run.workflow
    spec = recovery.WorkflowSpec(tuple(workflow.stages), frozenset(workflow.effect_stages), workflow.max_retries)
    effect_rows = list(selectors.effects_of_intent(run=run))
    effect_status = selectors.stage_effect_statuses(effect_rows)
    stages = []
    for stage in spec.stages:
        entry = (run.stage_states or {}).get(stage) or {}
        item = {"stage": stage, "status": effects.stage_word(entry.get("status"), effect_status.get(stage))}
        if entry.get("pointer"):
            item["pointer"] = entry["pointer"]
        stages.append(item)
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
        "earlier_attempts_spent": earlier_attempts_spent(run),  # SPEC §16
        "facts": [],
        "leads": [],
        "rules": RULES,
        "approx_tokens": 0,
        "omitted": {"facts": 0, "leads": 0},
    }
    facts_in, leads_in = (_scoped(run, user=user, now=now, use_as=use) for use in ("fact", "lead"))
    fact_total = facts_in.count() if facts_in is not None else 0
    lead_total = leads_in.count() if leads_in is not None else 0
    # The core with room for the counters' widest values; then facts and leads fill what is left.
    core = _size({**packet, "approx_tokens": BUDGET_MAX, "omitted": {"facts": fact_total, "leads": lead_total}})
    budget_bytes = budget_tokens * 4
    if core > budget_bytes:
        raise Invalid("budget_too_small", f"The decision, stages and effects alone need about "
                                          f"{approx_tokens(core)} tokens; ask for at least that many.",
                      needed_tokens=approx_tokens(core))
    room = budget_bytes - core
    # Leads are dropped first (the longest-stale first), then facts (the oldest observed first).
    facts, fact_bytes = _newest_that_fit(facts_in, newest_first=FACTS_NEWEST, item=_fact, room=room)
    leads_room = room - fact_bytes if len(facts) == fact_total else 0
    leads, _ = _newest_that_fit(leads_in, newest_first=LEADS_NEWEST, item=_lead, room=leads_room)
    packet["facts"], packet["leads"] = [entry for _, entry in facts], [entry for _, entry in leads]
    packet["omitted"] = {"facts": fact_total - len(facts), "leads": lead_total - len(leads)}
    packet["approx_tokens"] = approx_tokens(_size({**packet, "approx_tokens": BUDGET_MAX}))
    if facts_in is not None:  # a workflow without a knowledge scope serves no claims: nothing to record
        dropped = (_over_budget(facts_in, newest_first=FACTS_NEWEST, kept=len(facts), total=fact_total)
                   + _over_budget(leads_in, newest_first=LEADS_NEWEST, kept=len(leads), total=lead_total))
        _served_record(run, user=user, now=now, budget_tokens=budget_tokens, packet=packet, facts=facts,
                       leads=leads, dropped=dropped[:LEFT_OUT_NAMED], scope=run.workflow.knowledge_scope or {})
    return packet
