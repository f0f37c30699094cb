"""Agents lease queued runs (SPEC §9.1): oldest queued first, never one past its time, never twice."""

from __future__ import annotations

import time

from django.db import connection, transaction
from django.utils import timezone

from ledger import authorizers
from ledger.domain.kinds import EventKind
from ledger.models import Run, Workflow
from ledger.services.writer import RunWriter, run_lock
from ledger.store import store
from stateboard.errors import Invalid
from stateboard.roles import actor_for

POLL_FIRST, POLL_MAX = 0.05, 1.0  # long-poll backoff (seconds)
WEB = "system:web"  # the web tier, giving back a lease whose answer it could not deliver


def run_lease_once(*, actor: str, workflows: list[str] | None = None) -> Run | None:
    """Lease the earliest-queued run of ``workflows`` (all when None; a workflow whose ``agents`` do not
    name the caller is passed over) to ``actor``, or None. No two callers receive the same run
    (``store().run_queued_lock``)."""
    now = timezone.now()
    with transaction.atomic():
        run = store().run_queued_lock(agent=actor.removeprefix("agent:"), workflows=workflows, now=now)
        if run is None:
            return None
        writer = RunWriter(run, actor, now)
        writer.lease_grant(actor)
        writer.flush()  # (its `leased` event is the writer's record of the new lease)
    return run


def run_lease(*, user, workflows=None, wait_seconds: int = 0, existing: set[str] | None = None) -> Run | None:
    """Lease a queued run to ``user`` (an agent: ``may_lease``), waiting up to ``wait_seconds`` for one
    (long-poll). ``existing``: which of ``workflows`` exist, when the caller read them already (the
    pipeline's read of their ``agents``).

    The wait here is the plain WSGI server's (gunicorn) and the in-process client's: under the ASGI entry
    the view waits 0 and ``stateboard.waits`` parks the request until NOTIFY wakes it. Between polls no
    transaction is open and the database connection is given back, so waiting agents hold no connection."""
    authorizers.may_lease(user)
    actor = actor_for(user)
    if workflows is not None:
        if not isinstance(workflows, list) or not all(isinstance(w, str) for w in workflows):
            raise Invalid("validation_error", "workflows must be a list of workflow slugs.")
        if existing is None:
            existing = set(Workflow.objects.filter(slug__in=workflows).values_list("slug", flat=True))
        unknown = set(workflows) - existing
        if unknown:
            raise Invalid("unknown_workflow", f"No workflow with slug {sorted(unknown)[0]!r}.")
    if isinstance(wait_seconds, bool) or not isinstance(wait_seconds, (int, float)) or not 0 <= wait_seconds <= 30:
        raise Invalid("validation_error", "wait_seconds must be a number from 0 to 30.")
    deadline = time.monotonic() + wait_seconds
    pause = POLL_FIRST
    while True:
        run = run_lease_once(actor=actor, workflows=workflows or None)
        if run is not None:
            return run
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        if not connection.in_atomic_block:
            connection.close()  # (the pool, when configured, takes it back)
        time.sleep(min(pause, remaining))
        pause = min(pause * 2, POLL_MAX)


def queued_left(workflow: str) -> bool:
    """Whether a run of ``workflow`` is still queued and not being taken: a long-poll woken for it that found
    nothing it may take wakes the next waiter only then (``stateboard.waits``), so a run another process's
    waiter took ends the chain instead of walking every waiter of this one."""
    return store().run_queued_left(workflow=workflow, now=timezone.now())


def lease_release_undelivered(*, run_id, lease_id: str, event_count: int) -> bool:
    """Queue again, for any agent, a run whose lease answer never reached its agent (the client of a
    long-poll went away): only while the run is exactly as leased (the same lease, no event since), so
    nothing its holder did is undone. The ``released`` event says why; waiting leases are woken."""
    with transaction.atomic():
        run = run_lock(run_id)
        if str(run.lease_id) != lease_id or run.event_count != event_count:
            return False
        writer = RunWriter(run, WEB, timezone.now())
        writer.queue()
        writer.emit(EventKind.RELEASED, run.current_stage, reason_code="answer_undelivered", data={})
        writer.flush()
    return True
