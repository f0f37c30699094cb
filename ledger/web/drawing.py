"""The run page's drawings, from ``ledger.domain.machine`` and the run's own ledger events.

- ``run_path``: the states the run went through, in order, each step labelled with its cause and the
  ledger ``seq`` of its transition event; the current state first. Drawn as a wrapping row of HTML
  boxes and arrows (the browser lays out the text, so no label is ever cut or overlaps another).
- ``machine_table``: the full machine, one row per state with its outgoing transitions and their
  causes, the run's visited states and taken transitions marked.
- ``stage_timeline``: each stage's start, duration and outcome on the run's time axis (SVG bars).
"""

from __future__ import annotations

from datetime import datetime

from ledger import selectors
from ledger.domain import effects, machine
from ledger.models import TERMINAL_STATES

# The machine's states in the order a run meets them (lifecycle first, the ends last).
STATE_ORDER = ("captured", "restore", "compare", "fresh", "resume", "verify_only", "execute", "checkpointed",
               "verify", "awaiting_approval", "escalated", "compensate", "completed", "noop", "compensated",
               "abandoned", "failed")
BAD = frozenset({"failed", "escalated", "abandoned"})
GOOD = frozenset({"completed", "compensated", "noop"})
AXIS = 1000  # the timeline's SVG units across


def tone(state: str) -> str:
    return "bad" if state in BAD else "good" if state in GOOD else ""


def run_path(transitions: list[dict], current: str) -> dict:
    """``transitions``: the run's transition events in order ({seq, at, stage, reason_code, from, to, cause}).

    Returns ``steps`` (the first is ``captured``, with no incoming step) and ``now`` (the current state,
    since when, and what moved it there)."""
    steps = [{"state": "captured", "tone": "", "first": True}]
    for row in transitions:
        came_from = row.get("from") or steps[-1]["state"]
        to = row.get("to") or ""
        cause = row.get("cause") or "/".join(machine.causes(came_from, to)) or "?"
        steps.append({"state": to, "from": came_from, "cause": cause, "seq": row.get("seq"),
                      "stage": row.get("stage") or "", "reason": row.get("reason_code") or "", "at": row.get("at"),
                      "tone": tone(to), "allowed": machine.allowed(came_from, cause, to)})
    steps[-1]["current"] = True
    last = steps[-1] if len(steps) > 1 else None
    return {"steps": steps, "now": {"state": current, "tone": tone(current), "terminal": current in TERMINAL_STATES,
                                    "since": last["at"] if last else None, "step": last},
            "count": len(steps) - 1}


def machine_table(transitions: list[dict], current: str) -> dict:
    """Every state of the machine with its outgoing transitions (target and causes), the run's marked."""
    taken: dict[tuple[str, str], list[int]] = {}
    visited = {"captured"}
    for row in transitions:
        taken.setdefault((row.get("from") or "", row.get("to") or ""), []).append(row.get("seq"))
        visited.add(row.get("to") or "")
    rows = []
    for state in STATE_ORDER:
        targets = sorted({b for a, b in machine.EDGES if a == state}, key=STATE_ORDER.index)
        rows.append({"state": state, "tone": tone(state), "visited": state in visited, "current": state == current,
                     "terminal": state in TERMINAL_STATES,
                     "out": [{"to": b, "causes": machine.causes(state, b), "taken": (state, b) in taken,
                              "seqs": taken.get((state, b), [])} for b in targets]})
    return {"rows": rows, "states": len(STATE_ORDER), "transitions": len(machine.TRANSITIONS),
            "edges": len(machine.EDGES)}


def _pointer_run(pointer: str) -> tuple[str, str] | None:
    """``ledger:<run id>/<seq>`` → (run id, seq); None for any other pointer."""
    if not isinstance(pointer, str) or not pointer.startswith("ledger:"):
        return None
    run_id, _, seq = pointer[len("ledger:"):].partition("/")
    return (run_id, seq) if run_id else None


def stage_timeline(run, stage_events: list[tuple[str, str, datetime]], effect_rows, *, now: datetime) -> dict:
    """Per stage of the workflow: its bar on the run's axis (from its first event to its last outcome;
    ``wait`` is the part before ``started``, an approval or a proposal), its word (the same as the stage
    cards and the resume packet), and, for a stage done by an earlier attempt, the run that did it.

    ``stage_events``: (stage, kind, at) of the run's stage events, oldest first."""
    effect_status = selectors.stage_effect_statuses(effect_rows)
    performers = {e.stage: str(e.run_id) for e in effect_rows}
    spans: dict[str, dict] = {}
    for stage, kind, at in stage_events:
        span = spans.setdefault(stage, {"first": at, "start": None, "end": None, "outcome": None})
        if kind == "started" and span["start"] is None:
            span["start"] = at
        if kind in ("succeeded", "failed", "skipped", "verified", "unknown"):
            span["end"], span["outcome"] = at, kind
    begin = run.created_at
    finish = run.ended_at or max([now, *[s["end"] or s["first"] for s in spans.values()]])
    total = max((finish - begin).total_seconds(), 0.001)

    def x(moment) -> float:
        return round(min(max((moment - begin).total_seconds() / total, 0.0), 1.0) * AXIS, 1)

    rows = []
    stage_states = run.stage_states or {}
    for stage in run.workflow.stages:
        entry = stage_states.get(stage) or {}
        word = effects.stage_word(entry.get("status"), effect_status.get(stage))
        span = spans.get(stage)
        row = {"stage": stage, "word": word, "effect_stage": stage in run.workflow.effect_stages,
               "current": stage == run.current_stage and not run.is_terminal, "span": None, "by": None}
        if span:
            start, end = span["start"] or span["first"], span["end"]
            running_end = end or (now if not run.is_terminal else run.ended_at or now)
            row["span"] = {
                "first": span["first"], "start": span["start"], "end": end, "outcome": span["outcome"] or "running",
                "seconds": (end - start).total_seconds() if end else None,
                "wait_x": x(span["first"]), "wait_w": max(x(start) - x(span["first"]), 0.0),
                "x": x(start), "w": max(x(running_end) - x(start), 4.0),
            }
        else:
            pointer = _pointer_run(entry.get("pointer", ""))
            by = performers.get(stage) or (pointer[0] if pointer else None)
            if by and by != str(run.id):
                row["by"] = {"run": by, "seq": pointer[1] if pointer and pointer[0] == by else ""}
        rows.append(row)
    return {"rows": rows, "begin": begin, "finish": finish, "seconds": total, "ended": bool(run.ended_at)}
