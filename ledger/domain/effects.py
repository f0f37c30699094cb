"""An effect's life (SPEC §1) as one pure function, used by the event handlers and by the projection
rebuild alike, and the status groups every reader shares."""

from __future__ import annotations

from stateboard.canonical import digest

STATUSES = ("attempted", "effective", "verified", "failed", "unknown", "compensated", "isolated")
# Happened (or may have) but not proven: a later run must verify these, never re-execute them.
UNVERIFIED = frozenset({"attempted", "effective", "unknown"})
# The effect never happened: the key may be claimed again. A compensated or isolated key never is
# (SPEC §1): the stage's next attempt runs under the next generation's key instead.
CLAIMABLE_AGAIN = frozenset({"failed"})
# Taken out of the run's progress (SPEC §10.2): undone by a compensation, or isolated by a rollback.
UNDONE = frozenset({"compensated", "isolated"})
# The world may hold the effect: what a compensation has to undo (an isolated one too).
HELD = frozenset(STATUSES) - CLAIMABLE_AGAIN - {"compensated"}


def effect_key_namespaced(*, workflow_slug: str, intent: str, key: str) -> str:
    """An agent's own idempotency key as stored (API.md): namespaced by its run's workflow and intent, so keys
    stay unique across the install and no intent can take another's. Digested from an object, never a list:
    it cannot be any intent's default key (``[workflow, intent, fingerprint, stage]``)."""
    return digest({"workflow": workflow_slug, "intent": intent, "key": key})


def effect_next(status: str | None, kind: str, *, run_state: str, reason_code: str = "") -> str | None:
    """The status an effect takes when an event of ``kind`` on its stage is recorded while the run is
    in ``run_state``; None when the event does not move it (``status`` None: no effect yet)."""
    if kind == "started":
        return "attempted" if status is None or status in CLAIMABLE_AGAIN else None
    if status is None:
        return None
    if kind == "compensated":
        return "compensated" if status in HELD else None
    if kind == "rolled_back":  # a rollback isolates what happened at its stage or later
        return "isolated" if status in HELD - UNDONE else None
    if status not in UNVERIFIED:
        return None
    if kind == "succeeded":
        return "effective"
    if kind in ("unknown", "verified"):
        return kind
    if kind == "failed":  # in execute it definitely did not happen; in verify only when checked absent
        return "failed" if run_state == "execute" or reason_code == "effect_absent" else None
    if kind == "skipped":  # skipped after its start: it never happened
        return "failed" if status == "attempted" else None
    return None


def effect_moves(kind: str, *, run_state: str, reason_code: str = "") -> tuple[str | None, frozenset[str]]:
    """(target status, statuses it moves from) for an event: one UPDATE … WHERE status IN (…)."""
    moves = {s: effect_next(s, kind, run_state=run_state, reason_code=reason_code) for s in STATUSES}
    targets = {t for t in moves.values() if t is not None}
    assert len(targets) <= 1, (kind, targets)
    return (targets.pop() if targets else None), frozenset(s for s, t in moves.items() if t is not None)


def stage_word(status: str | None, effect_status: str | None) -> str:
    """A stage's status as the resume packet and the run page show it (SPEC §11.3): a stage whose effect
    is attempted, effective or unknown is ``unknown`` (it must be verified), never succeeded or verified."""
    if effect_status in UNVERIFIED:
        return "unknown"
    return status or "pending"


# An execution: the stage's outcome says the call was (or may have been) made.
EXECUTION_KINDS = ("succeeded", "unknown")


def first_repeat(history):
    """The first item of ``history`` — (kind, reason_code, item) of one key's ``succeeded``, ``unknown``
    and ``failed`` events, oldest first — that executed the effect again while an earlier execution may
    have happened; None when none did. Only ``failed`` with ``effect_absent`` (SPEC §5.2) in between
    proves the earlier one absent."""
    may_have_happened = False
    for kind, reason_code, item in history:
        if kind == "failed":
            may_have_happened = may_have_happened and reason_code != "effect_absent"
        else:
            if may_have_happened:
                return item
            may_have_happened = True
    return None
