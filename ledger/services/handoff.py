"""The agent's proposal on an executor stage hands the run to Stateboard's executor (SPEC §5.2)."""

from __future__ import annotations

from django.contrib.auth import get_user_model

from ledger.services.approvals import action_validate, high_impact_open
from ledger.services.outbox import EXECUTOR_TASK, outbox_put
from ledger.services.writer import RunWriter


def executor_handoff(writer: RunWriter, *, stage: str, action, proposal_seq: int) -> None:
    """Record who hands over and what, then either raise the high-impact request (approval stage) or
    enqueue the executor once this transaction commits. The agent's lease does not run out meanwhile."""
    run = writer.run
    action = action_validate(action, params=True)
    writer.executor_hold(stage=stage, action=action, proposal_seq=proposal_seq)
    if stage in run.workflow.approval_stages:
        high_impact_open(writer, stage=stage, action=action, cause="proposed", requested_by=writer.actor,
                         user=_agent_user(writer.actor))
    else:
        run.current_stage = stage
        outbox_put(task=EXECUTOR_TASK, args=[str(run.id), stage],
                   dedupe_key=f"executor:{run.id}:{stage}:proposal:{proposal_seq}")


def _agent_user(actor: str):
    """The requesting agent's user (so the requester rule binds), or None."""
    if not actor.startswith("agent:"):
        return None
    return get_user_model().objects.filter(username=actor.split(":", 1)[1]).first()
