"""The state machine table and the effect transition function are the engine's one home for those rules."""

import pytest
from django.utils import timezone

from ledger.domain import effects, machine
from ledger.models import RunState
from ledger.services import RunWriter
from stateboard.errors import Conflict
from tests.factories import make_workflow


def test_machine_table_names_only_real_states():
    """Every state in the table is a RunState, and every RunState but the start is reachable."""
    states = {s for a, _, b in machine.TRANSITIONS for s in (a, b)}
    assert states <= set(RunState.values)
    reachable = {b for _, _, b in machine.TRANSITIONS}
    assert set(RunState.values) - reachable == {"captured"}


def test_machine_terminal_states_only_leave_by_rollback_or_goal():
    """Terminal states have no outgoing edge in the table (rollback edges come with §10.2)."""
    for a, cause, _ in machine.TRANSITIONS:
        if a in ("completed", "noop", "compensated", "abandoned"):
            assert cause in ("rolled_back", "goal_changed"), (a, cause)


@pytest.mark.django_db
def test_run_writer_refuses_a_move_outside_the_table():
    """A transition that is not in TRANSITIONS is a 409 illegal_transition, and nothing is emitted."""
    from ledger.models import Run

    workflow = make_workflow()
    run = Run(workflow=workflow, intent="x", trigger_key="k", inputs={}, input_fingerprint="f", policy_version="1",
              state="completed", created_at=timezone.now())
    writer = RunWriter(run, "system", timezone.now())
    with pytest.raises(Conflict) as refused:
        writer.transition("execute", cause="started")
    assert refused.value.code == "illegal_transition"
    assert writer.events == [] and run.state == "completed"


@pytest.mark.parametrize("status,kind,state,reason,expected", [
    (None, "started", "checkpointed", "", "attempted"),
    ("failed", "started", "checkpointed", "", "attempted"),
    ("attempted", "started", "checkpointed", "", None),
    ("verified", "started", "checkpointed", "", None),
    ("attempted", "succeeded", "execute", "", "effective"),
    ("effective", "verified", "verify", "", "verified"),
    ("unknown", "verified", "verify_only", "", "verified"),
    ("attempted", "unknown", "execute", "", "unknown"),
    ("attempted", "failed", "execute", "boom", "failed"),
    ("effective", "failed", "verify", "effect_absent", "failed"),
    ("effective", "failed", "verify", "partial", None),
    ("attempted", "skipped", "execute", "", "failed"),
    ("effective", "skipped", "execute", "", None),
    ("verified", "compensated", "compensate", "", "compensated"),
    ("failed", "compensated", "compensate", "", None),
    ("verified", "succeeded", "execute", "", None),
    ("compensated", "started", "checkpointed", "", None),  # never claimed again (SPEC §1)
    ("isolated", "started", "checkpointed", "", None),
    ("verified", "rolled_back", "completed", "", "isolated"),
    ("unknown", "rolled_back", "failed", "", "isolated"),
    ("failed", "rolled_back", "completed", "", None),
    ("compensated", "rolled_back", "completed", "", None),
    ("isolated", "compensated", "compensate", "", "compensated"),
])
def test_effect_next_follows_the_spec(status, kind, state, reason, expected):
    """SPEC §1 effect statuses: attempted → effective → verified, failed/unknown/compensated."""
    assert effects.effect_next(status, kind, run_state=state, reason_code=reason) == expected


def test_effect_moves_groups_sources_by_one_target():
    """The handlers' UPDATE … WHERE status IN (sources) is derived from the same function."""
    target, sources = effects.effect_moves("verified", run_state="verify")
    assert target == "verified" and sources == effects.UNVERIFIED
    target, sources = effects.effect_moves("compensated", run_state="compensate")
    assert target == "compensated" and sources == effects.HELD
    target, sources = effects.effect_moves("rolled_back", run_state="completed")
    assert target == "isolated" and sources == effects.HELD - effects.UNDONE
