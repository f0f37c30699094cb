"""What knowledge needs from the rest of the house, as plain functions: the one door to the ledger.

Knowledge imports nothing from ``ledger``. The few ledger facts and services it needs (is a ledger
event a ``verified`` one, the oldest knowledge boundary a live checkpoint can restore, sending
notifications and chat messages, recording an audit entry) come through these functions. Until something wires an
implementation (``ledger.apps.LedgerConfig.ready`` does, with ``wire``) each raises ``PortNotWired``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Callable, Iterable, NamedTuple


class PortNotWired(RuntimeError):
    """A port was called before an implementation was wired (is the ``ledger`` app installed?)."""


class Notice(NamedTuple):
    """One notification to send: for ``user_id``, unique by ``dedupe_key`` (sent once per user and key)."""

    user_id: int
    kind: str
    subject: str
    url: str
    dedupe_key: str
    claim_key: str = ""


NAMES = ("event_is_verified", "oldest_live_version_boundary", "notifications_send_many", "notifications_settle",
         "audit_record", "chat_claims_stale")
_impl: dict[str, Callable] = {}


def wire(**implementations: Callable) -> None:
    """Set the implementations by name (any of ``NAMES``); an unknown name is a programming error."""
    unknown = set(implementations) - set(NAMES)
    if unknown:
        raise TypeError(f"knowledge.ports: no port named {', '.join(sorted(unknown))}")
    _impl.update(implementations)


def _get(name: str) -> Callable:
    try:
        return _impl[name]
    except KeyError:
        raise PortNotWired(f"knowledge.ports.{name} is not wired: the ledger app wires it in its ready() "
                           f"(is 'ledger' in INSTALLED_APPS?)") from None


def event_is_verified(*, event_id: int) -> bool:
    """True when the ledger event exists and is a ``verified`` event (a claim may rest on it)."""
    return _get("event_is_verified")(event_id=event_id)


def oldest_live_version_boundary(*, now: datetime) -> int | None:
    """Smallest ``version_boundary`` among checkpoints not yet expired (None: no such checkpoint)."""
    return _get("oldest_live_version_boundary")(now=now)


def notifications_settle(*, claim_keys: list[str], done: str, now: datetime | None = None) -> int:
    """The claims' open notifications (stale ones) are done: a newer version settled them."""
    return _get("notifications_settle")(claim_keys=claim_keys, done=done, now=now)


def notifications_send_many(notices: Iterable[Notice], *, now: datetime | None = None) -> list[int]:
    """Send the notices, skipping ones already sent (per user and dedupe key); the new rows' ids."""
    return _get("notifications_send_many")(notices, now=now)


def chat_claims_stale(*, claim_ids: list[int]) -> int:
    """Post the team's chat message for each of these stale claim versions, once each (SPEC §12.3)."""
    return _get("chat_claims_stale")(claim_ids=claim_ids)


def audit_record(*, user, action: str, outcome: str, target: str = "", code: str = "", reason: str = "",
                 data: dict | None = None) -> None:
    """Record an audit entry for an action the ledger's events do not hold (e.g. a retention erase)."""
    _get("audit_record")(user=user, action=action, outcome=outcome, target=target, code=code, reason=reason,
                         data=data)
