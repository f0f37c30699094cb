"""The ledger's event kinds: what each is, who writes it, which transitions it may cause.

Every kind is declared once in ``KINDS``; the services' handlers (``ledger.services.events``), the state
machine's causes (``ledger.domain.machine``), the OpenAPI schema (``ledger.api.components``) and the
client (``stateboard.client``) are held to it by ``tests/ledger/test_event_kinds.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import TextChoices


class EventKind(TextChoices):
    STARTED = "started"
    PROPOSED = "proposed"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED = "skipped"
    VERIFIED = "verified"
    UNKNOWN = "unknown"
    DECIDED = "decided"
    TRANSITION = "transition"
    CHECKPOINTED = "checkpointed"
    APPROVAL_REQUESTED = "approval_requested"
    APPROVED = "approved"
    REJECTED = "rejected"
    COMPENSATED = "compensated"
    RETRIED = "retried"
    ABANDONED = "abandoned"
    EXPIRED = "expired"
    CORRECTED = "corrected"
    LEASED = "leased"
    ROLLED_BACK = "rolled_back"
    GOAL_CHANGED = "goal_changed"
    RELEASED = "released"
    ESCALATION_RAISED = "escalation_raised"
    ESCALATION_CLOSED = "escalation_closed"
    APPROVAL_VOIDED = "approval_voided"
    ATTRIBUTES_SET = "attributes_set"
    APPROVAL_VOTED = "approval_voted"


STAGE_OUTCOME_KINDS = frozenset({"started", "proposed", "succeeded", "failed", "skipped", "verified", "unknown"})


@dataclass(frozen=True)
class Kind:
    """``agent_postable``: an agent (or the executor on its behalf) posts it to ``/runs/{id}/events/``;
    else Stateboard writes it. ``causes``: the transition causes it may drive (``machine.TRANSITIONS``)."""

    agent_postable: bool
    causes: tuple[str, ...] = ()
    summary: str = ""


K = EventKind
KINDS: dict[str, Kind] = {
    K.STARTED: Kind(True, ("started",), "a stage starts; on an effect stage it claims the effect key"),
    K.PROPOSED: Kind(True, ("proposed",), "an executor stage's action is handed to Stateboard's executor"),
    K.SUCCEEDED: Kind(True, ("succeeded",), "the stage passed (with the effect on an effect stage)"),
    K.FAILED: Kind(True, ("failed",), "the stage failed, or a checked effect never happened (effect_absent)"),
    K.SKIPPED: Kind(True, ("skipped",), "the stage is not needed"),
    K.VERIFIED: Kind(True, ("verified",), "the effect was checked and is there (evidence required)"),
    K.UNKNOWN: Kind(True, ("unknown",), "the effect's outcome was not observed: it must be verified"),
    K.CORRECTED: Kind(True, (), "a note correcting an earlier event (data.corrects)"),
    K.COMPENSATED: Kind(True, ("compensated",), "the approved compensation was performed and verified"),
    K.ATTRIBUTES_SET: Kind(True, (), "the run's attributes added or changed (data.attributes; null removes a "
                                     "key); moves nothing"),
    K.DECIDED: Kind(False, ("decided",), "the recovery decision of a trigger, retry, goal change or rollback"),
    K.TRANSITION: Kind(False, (), "the run moved along one edge of the state machine"),
    K.CHECKPOINTED: Kind(False, (), "a server checkpoint was written"),
    K.APPROVAL_REQUESTED: Kind(False, ("approval_requested",), "a human decision was asked for"),
    K.APPROVED: Kind(False, (), "a person approved a request (the run goes on from where it waited); with a quorum, "
                                "the vote that met it"),
    K.APPROVAL_VOTED: Kind(False, (), "an eligible approver approved a request whose quorum is not met yet (SPEC §17: "
                                      "data.approval, data.reason, data.votes of data.quorum)"),
    K.REJECTED: Kind(False, ("rejected",), "a person rejected a request"),
    K.RETRIED: Kind(False, ("retried",), "on-call retried an escalated run"),
    K.ABANDONED: Kind(False, ("abandoned",), "on-call abandoned a run"),
    K.EXPIRED: Kind(False, ("expired",), "a request's deadline passed"),
    K.LEASED: Kind(False, (), "the run's lease went to data.owner (an agent: its lease call, trigger or goal post; "
                              "the executor; the agent again) under data.lease_id"),
    K.RELEASED: Kind(False, (), "nobody holds the run's lease any more: it is queued for any agent"),
    K.ROLLED_BACK: Kind(False, ("rolled_back",), "the run was rolled back to a stage"),
    K.GOAL_CHANGED: Kind(False, ("goal_changed",), "the intent's goal changed"),
    K.ESCALATION_RAISED: Kind(False, (), "a request for on-call was opened (data.approval, status pending)"),
    K.ESCALATION_CLOSED: Kind(False, (), "on-call's retry, compensation, rollback or abandon closed the request"),
    K.APPROVAL_VOIDED: Kind(False, (), "an open request or unspent permit no longer covers anything (a goal "
                                       "change, a rollback, an abandon): expired"),
}

# The kinds that set an approval's status, naming it in data.approval: the status each sets (None: data.status).
APPROVAL_STATUS_KINDS: dict[str, str | None] = {
    K.APPROVAL_REQUESTED: "pending", K.ESCALATION_RAISED: "pending", K.APPROVED: "approved", K.REJECTED: "rejected",
    K.EXPIRED: "expired", K.APPROVAL_VOIDED: "expired", K.ESCALATION_CLOSED: None,
}

AGENT_KINDS = frozenset(kind for kind, spec in KINDS.items() if spec.agent_postable)
