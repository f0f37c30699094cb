"""Builders for knowledge tests: valid proposals, verified ledger events, people and agents."""

from datetime import timedelta

import pytest
from django.utils import timezone

from tests.factories import client_for, make_agent, make_operator, make_workflow, unique


def iso(moment) -> str:
    return moment.isoformat()


def proposal(**overrides) -> dict:
    """A proposal the write gate accepts as active; override fields to break it."""
    now = timezone.now()
    data = {
        "key": unique("billing.api/timeout"),
        "statement": "The billing API times out after 30 s.",
        "source_refs": ["https://docs.example.com/billing#timeouts"],
        "source_type": "official-doc",
        "scope": {"system": "billing", "version": "2.1", "task": "triage"},
        "confidence": "reported",
        "observed_at": iso(now - timedelta(hours=1)),
        "refresh_after": iso(now + timedelta(days=20)),
    }
    data.update(overrides)
    return {k: v for k, v in data.items() if v is not ...}


def make_ledger_event(kind: str = "verified") -> int:
    """Insert a minimal run and one ledger event of ``kind``; returns the event id."""
    from ledger.models import LedgerEvent, Run

    now = timezone.now()
    run = Run.objects.create(
        workflow=make_workflow(), intent="post", trigger_key=unique("tk"), inputs={},
        input_fingerprint="f" * 64, policy_version="1", created_at=now, updated_at=now,
    )
    event = LedgerEvent.objects.create(
        run=run, intent=run.intent, seq=1, at=now, kind=kind, stage="verify", actor="agent:test",
        input_fingerprint="f" * 64, policy_version="1", hash="a" * 64,
    )
    return event.id


class Actor:
    """A user with a token and an API client."""

    def __init__(self, user, token):
        self.user, self.token = user, token
        self.client = client_for(token)


def _operator_fixture(name: str, role: str):
    """The fixture ``name``: a new operator in ``role``, as an Actor."""
    def actor():
        return Actor(*make_operator(role))
    actor.__doc__ = f"A new operator in the {role} role, as an Actor."
    return pytest.fixture(actor, name=name)


owner = _operator_fixture("owner", "owner")
other_owner = _operator_fixture("other_owner", "owner")
editor = _operator_fixture("editor", "editor")
viewer = _operator_fixture("viewer", "viewer")


@pytest.fixture
def agent(owner):
    """An agent owned by the ``owner`` fixture."""
    return Actor(*make_agent(owner=owner.user))


@pytest.fixture
def lone_agent():
    """An agent with no owning user."""
    return Actor(*make_agent())


def make_checkpoint(*, version_boundary, expires_in=timedelta(hours=24)) -> None:
    """Insert a checkpoint that holds a knowledge snapshot up to ``version_boundary``."""
    from ledger.models import Checkpoint, Run

    now = timezone.now()
    workflow = make_workflow()
    run = Run.objects.create(
        workflow=workflow, intent="post", trigger_key=unique("tk"), inputs={},
        input_fingerprint="f" * 64, policy_version="1", created_at=now, updated_at=now,
    )
    Checkpoint.objects.create(
        workflow=workflow, intent="post", run=run, source="agent", payload={"stage": "draft"},
        input_fingerprint="f" * 64, policy_version="1", version_boundary=version_boundary,
        created_at=now, expires_at=now + expires_in,
    )
