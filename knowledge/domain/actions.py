"""Which changes a claim's current value still allows (SPEC §4), by its stored status alone.

One rule for two callers: the services, which refuse a refresh of a claim that is not live and write
nothing for a tombstone that changes nothing, and the pages, which offer only the buttons these let
through (with the authorizers, who decides the role). Pure: statuses are the stored strings.
"""

ACTIVE, INVALIDATED, REVOKED = "active", "invalidated", "revoked"


def refreshable(current_status: str | None) -> bool:
    """Only a live value takes new evidence (``stale`` is stored ``active``); a tombstone is proposed anew."""
    return current_status == ACTIVE


def tombstone_changes(current_status: str | None, status: str) -> bool:
    """Whether tombstoning as ``status`` writes a version: not over the same tombstone (a retry), nor
    over a revoke, the stronger one. A key with no current value (only pending versions) may be."""
    return current_status is None or (current_status != status and current_status != REVOKED)


TOMBSTONE_OF = {"invalidate": INVALIDATED, "revoke": REVOKED}


def state_allows(action: str, current_status: str | None, *, removed: bool = False) -> bool:
    """The button rule: ``refresh``, ``invalidate`` or ``revoke`` on a key whose current value has
    ``current_status`` (None: none yet); nothing on a key whose history was garbage-collected."""
    if removed:
        return False
    if action == "refresh":
        return refreshable(current_status)
    if action in TOMBSTONE_OF:
        return tombstone_changes(current_status, TOMBSTONE_OF[action])
    return False
