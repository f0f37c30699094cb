"""The audit trail of human actions the ledger does not hold (refused attempts, policy bumps)."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from ledger.models import Approval, AuditEntry, RunKey
from stateboard.roles import actor_for, user_roles


def audit_record(*, user, action: str, outcome: str, run_id=None, target: str = "", code: str = "",
                 reason: str = "", data: dict | None = None, actor: str = "") -> None:
    """Human actions the ledger does not hold: refused attempts, workflow policy bumps and applies.
    ``actor`` names a system actor (``system:apply``) when there is no ``user``."""
    AuditEntry.objects.create(at=timezone.now(), actor=actor or actor_for(user), role=",".join(sorted(user_roles(user))),
                              action=action, outcome=outcome, run_id=run_id, target=target, code=code,
                              reason=reason or "", data=data or {})


def refusal_audit(*, user, action: str, code: str, run_id=None, approval_id=None, target: str = "",
                  reason: str = "", errors=None, actor: str = "") -> None:
    """The audit entry of one refused attempt, written outside the refused write's rolled-back transaction.
    What was refused: the approval, else the run, else ``target``; ``errors``, the refusal's own (e.g. each
    refused definition of an apply); ``actor`` names a caller who is no user (a sign-in locked out)."""
    if approval_id is not None:
        target = str(approval_id)
        run_id = Approval.objects.filter(id=approval_id).values_list("run_id", flat=True).first()
    elif run_id is not None:
        target = str(run_id)
    if run_id is not None and not RunKey.objects.filter(run_id=run_id).exists():
        run_id = None
    with transaction.atomic():
        audit_record(user=user, action=action, outcome="refused", run_id=run_id, target=str(target)[:200],
                     code=code, reason=(reason or "")[:1000], data={"errors": errors} if errors else None, actor=actor)
