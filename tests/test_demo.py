"""`manage.py demo --once` against a live server: every promised fault, none of them harmful."""

import pytest
from django.core.management import call_command

from ledger.models import Approval, LedgerEvent, Run

pytestmark = pytest.mark.django_db(transaction=True)


def _reasons() -> set[str]:
    return set(LedgerEvent.objects.filter(kind="decided").values_list("reason_code", flat=True))


def test_demo_once_produces_every_promised_fault(live_server, capsys):
    """One pass: the ledger holds each fault's decision, an executor effect and a pending approval; 0 duplicates."""
    from ledger import selectors

    call_command("demo", url=live_server.url, once=True, agents=3)
    out = capsys.readouterr().out
    assert "demo check: every promised fault produced" in out, out
    reasons = _reasons()
    for code in ("active_run_exists", "verified_effect_same_fingerprint", "effect_unverified", "input_changed",
                 "retry_budget_exhausted", "env_changed_downgraded", "resume_incomplete_stage"):
        assert code in reasons, (code, sorted(reasons))
    assert Approval.objects.filter(kind="high_impact", status="pending").exists()
    assert LedgerEvent.objects.filter(actor="system:executor", kind="verified", stage="publish").exists()
    assert Run.objects.filter(state="escalated", decision__reason_code="retry_budget_exhausted").exists()
    assert selectors.metrics()["duplicate_side_effects"] == 0
