"""The run page's drawing of the state machine, generated from ``ledger.domain.machine``.

States sit on a fixed grid; every edge of ``machine.EDGES`` is a quadratic curve whose bend is
chosen to clear the other boxes, and its label (the causes, plus the ledger ``seq`` of each
transition event that took it) is slid along the curve until it overlaps neither a box nor
another label. Edges whose only causes are ``lease_expired``, ``goal_changed`` or ``rolled_back`` (they reach
many states at once) are summed up in one legend line and drawn only when the run took one.
"""

from __future__ import annotations

import functools

from ledger.domain import machine
from ledger.models import TERMINAL_STATES

GRID = {
    "captured": (0, 0), "restore": (1, 0), "compare": (2, 0), "verify_only": (3, 0), "noop": (4, 0),
    "escalated": (0, 1), "fresh": (1, 1), "resume": (2, 1),
    "awaiting_approval": (0, 2), "execute": (1, 2), "checkpointed": (2, 2), "verify": (3, 2), "completed": (4, 2),
    "abandoned": (0, 3), "failed": (1, 3), "compensate": (3, 3), "compensated": (4, 3),
}
COL_W, ROW_H, BOX_W, BOX_H, PAD = 200, 128, 128, 32, 36
WIDTH, HEIGHT = PAD * 2 + 4 * COL_W + BOX_W, PAD * 2 + 3 * ROW_H + BOX_H
CHAR_W, LABEL_H = 6.0, 14.0
BAD = frozenset({"failed", "escalated", "abandoned"})
GOOD = frozenset({"completed", "compensated", "noop"})
LEASE = "lease_expired"
# Causes that reach many states at once (a lapsed lease, a goal change, a rollback): their edges are
# summed up in the legend and drawn only when the run took one.
RARE = frozenset({LEASE, "goal_changed", "rolled_back"})


def _box(state: str) -> tuple[float, float, float, float]:
    col, row = GRID[state]
    x, y = PAD + col * COL_W, PAD + row * ROW_H
    return x, y, x + BOX_W, y + BOX_H


def _centre(state: str) -> tuple[float, float]:
    x1, y1, x2, y2 = _box(state)
    return (x1 + x2) / 2, (y1 + y2) / 2


def _overlap(a, b, margin: float = 0.0) -> bool:
    return a[0] < b[2] + margin and b[0] < a[2] + margin and a[1] < b[3] + margin and b[1] < a[3] + margin


def _bezier(p0, c, p1, t):
    u = 1 - t
    return u * u * p0[0] + 2 * u * t * c[0] + t * t * p1[0], u * u * p0[1] + 2 * u * t * c[1] + t * t * p1[1]


def _border_point(state: str, towards) -> tuple[float, float]:
    """Where the segment from the box centre towards a point leaves the box."""
    cx, cy = _centre(state)
    dx, dy = towards[0] - cx, towards[1] - cy
    if dx == 0 and dy == 0:
        return cx, cy
    tx = (BOX_W / 2 + 3) / abs(dx) if dx else float("inf")
    ty = (BOX_H / 2 + 3) / abs(dy) if dy else float("inf")
    t = min(tx, ty)
    return cx + dx * t, cy + dy * t


def _curve(a: str, b: str, bend: float):
    (x1, y1), (x2, y2) = _centre(a), _centre(b)
    length = max(((x2 - x1) ** 2 + (y2 - y1) ** 2) ** 0.5, 1.0)
    nx, ny = -(y2 - y1) / length, (x2 - x1) / length
    control = ((x1 + x2) / 2 + nx * bend, (y1 + y2) / 2 + ny * bend)
    start, end = _border_point(a, control), _border_point(b, control)
    return start, control, end


@functools.lru_cache(maxsize=None)  # pure geometry: the same for every run
def _route(a: str, b: str, *, both_ways: bool):
    """The bend (perpendicular offset of the control point) whose curve crosses fewest other boxes."""
    others = [_box(s) for s in GRID if s not in (a, b)]
    best = None
    for bend in (0, 28, -28, 56, -56, 84, -84, 120, -120, 170, -170, 230, -230):
        if both_ways and bend == 0:
            continue  # a→b and b→a bend to opposite sides (the normal flips with the direction)
        start, control, end = _curve(a, b, bend)
        points = [_bezier(start, control, end, i / 20) for i in range(1, 20)]
        hits = sum(1 for p in points for box in others if _overlap((*p, *p), box, margin=6))
        hits += sum(1 for x, y in points if not (4 < x < WIDTH - 4 and 4 < y < HEIGHT - 4))
        score = hits * 100 + abs(bend)
        if best is None or score < best[0]:
            best = (score, start, control, end)
    return best[1:]


def _label_box(x: float, y: float, text: str):
    w = len(text) * CHAR_W + 8
    return x - w / 2, y - LABEL_H / 2, x + w / 2, y + LABEL_H / 2


def _place_label(text: str, curve, blocked: list) -> tuple[float, float, tuple]:
    """First spot along the curve (middle outwards, then nudged off it) that overlaps nothing placed."""
    start, control, end = curve
    spots = [(t, dx, dy) for dx in (0, 20, -20, 40, -40, 60, -60) for dy in (0, 10, -10, 20, -20, 30, -30)
             for t in (0.5, 0.42, 0.58, 0.34, 0.66, 0.26, 0.74, 0.18, 0.82)]
    fallback = None
    for t, dx, dy in spots:
        x, y = _bezier(start, control, end, t)
        x, y = x + dx, y + dy
        box = _label_box(x, y, text)
        clashes = sum(1 for other in blocked if _overlap(box, other, margin=2))
        clashes += 0 if box[0] >= 2 and box[1] >= 2 and box[2] <= WIDTH - 2 and box[3] <= HEIGHT - 2 else 10
        if clashes == 0:
            return x, y, box
        if fallback is None or clashes < fallback[0]:
            fallback = (clashes, x, y, box)
    return fallback[1], fallback[2], fallback[3]


def state_machine(transitions: list[tuple[int, dict]], current: str) -> dict:
    """Nodes, edges and labels of the drawing; ``transitions`` are (seq, data) of the run's transition events."""
    path = ["captured"]
    taken: dict[tuple[str, str], list[int]] = {}
    for seq, data in transitions:
        a, b = data.get("from") or path[-1], data.get("to") or ""
        taken.setdefault((a, b), []).append(seq)
        path.append(b)
    visited = set(path)
    rare_only = {(a, b) for a, b in machine.EDGES if set(machine.causes(a, b)) <= RARE}
    lease_only = {(a, b) for a, b in rare_only if machine.causes(a, b) == [LEASE]}
    pairs = sorted({*(e for e in machine.EDGES if e not in rare_only or e in taken),
                    *(e for e in taken if e[0] in GRID and e[1] in GRID)})
    blocked = [_box(s) for s in GRID]
    edges = []
    # Taken edges first, so their labels get the best spots.
    for a, b in sorted(pairs, key=lambda e: (e not in taken, e)):
        curve = _route(a, b, both_ways=(b, a) in pairs)
        causes = machine.causes(a, b) or ["(not in the machine)"]
        steps = taken.get((a, b), [])
        label = "/".join(causes) + (" " + " ".join(f"#{s}" for s in steps) if steps else "")
        x, y, box = _place_label(label, curve, blocked)
        blocked.append(box)
        start, control, end = curve
        edges.append({
            "from": a, "to": b, "taken": bool(steps), "causes": "/".join(causes),
            "steps": " ".join(f"#{s}" for s in steps), "allowed": (a, b) in machine.EDGES,
            "d": f"M{start[0]:.1f},{start[1]:.1f} Q{control[0]:.1f},{control[1]:.1f} {end[0]:.1f},{end[1]:.1f}",
            "lx": round(x, 1), "ly": round(y, 1), "label_box": tuple(round(v, 1) for v in box),
            "lw": round(box[2] - box[0], 1), "lh": round(box[3] - box[1], 1),
        })
    edges.sort(key=lambda e: e["taken"])  # taken edges drawn last, on top
    nodes = []
    for state in GRID:
        x1, y1, _, _ = _box(state)
        nodes.append({
            "name": state, "x": x1, "y": y1, "tx": x1 + BOX_W / 2, "ty": y1 + BOX_H / 2 + 4,
            "visited": state in visited, "current": state == current, "terminal": state in TERMINAL_STATES,
            "tone": "bad" if state in BAD else "good" if state in GOOD else "",
        })
    lease_from = sorted(a for a, _ in lease_only)
    return {
        "nodes": nodes, "edges": edges, "path": path, "box_w": BOX_W, "box_h": BOX_H,
        "width": WIDTH, "height": HEIGHT,
        "legend": (f"{LEASE}: any of {', '.join(lease_from)} → failed; goal_changed: a run between stages → "
                   "restore; rolled_back: a finished run → restore or compensate (drawn when taken)"
                   if lease_from else ""),
    }
