"""The audit trail of human actions the ledger does not hold (refused attempts, policy bumps)."""

from __future__ import annotations

from django.utils import timezone

from ledger.models import AuditEntry
from stateboard.roles import actor_for, user_roles


def audit_record(*, user, action: str, outcome: str, run_id=None, target: str = "", code: str = "",
                 reason: str = "", data: dict | None = None, actor: str = "") -> None:
    """Human actions the ledger does not hold: refused attempts, workflow policy bumps and applies.
    ``actor`` names a system actor (``system:apply``) when there is no ``user``."""
    AuditEntry.objects.create(at=timezone.now(), actor=actor or actor_for(user), role=",".join(sorted(user_roles(user))),
                              action=action, outcome=outcome, run_id=run_id, target=target, code=code,
                              reason=reason or "", data=data or {})


