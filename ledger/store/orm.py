"""The store on the ORM alone: correct on every database Django supports, used on SQLite.

SQLite has one writer at a time (a write transaction takes the database lock), so the intent lock
needs nothing and a run's lock is the write transaction itself.
"""

from __future__ import annotations

import uuid

from django.db import IntegrityError, connection, transaction
from django.db.models import CharField, F, Func, IntegerField, Q, Value
from django.db.models.lookups import Exact

from ledger.models import (
    HOLDING_STATES,
    ApiToken,
    Checkpoint,
    Effect,
    EffectKey,
    LedgerEvent,
    Run,
    RunKey,
    Workflow,
    WorkflowDaySpend,
)
from ledger.store.reads import Reads

_SPEND = WorkflowDaySpend._meta.db_table
# A workflow's day incremented (SQLite and PostgreSQL alike); ``source``: its one row, VALUES or a SELECT.
SPEND_UPSERT = (f'INSERT INTO "{_SPEND}" (workflow_id, day, input_tokens, output_tokens, cost_micro_usd) {{source}} '
                f'ON CONFLICT (workflow_id, day) DO UPDATE SET '
                f'input_tokens = "{_SPEND}".input_tokens + excluded.input_tokens, '
                f'output_tokens = "{_SPEND}".output_tokens + excluded.output_tokens, '
                f'cost_micro_usd = "{_SPEND}".cost_micro_usd + excluded.cost_micro_usd')


class OrmStore:
    writes_unless_changed = False  # no row version to write against: every append takes the run's lock

    def snapshot_begin(self) -> None:
        """Make the open transaction read one snapshot (SQLite's transactions always do)."""

    def intent_lock(self, workflow_id: int, intent: str) -> None:
        """Serialise this transaction with every other writer of (workflow, intent)."""

    def workflow_read_intent_locked(self, slug: str, intent: str, then: Reads | None = None, /,
                                    **values) -> tuple[Workflow | None, list[list]]:
        """The workflow by slug, with ``intent_lock`` taken on (workflow, intent) when it exists, and ``then``'s
        rows (``reads``) read after the lock is held (none when the workflow does not exist)."""
        workflow = Workflow.objects.filter(slug=slug).first()
        if workflow is None:
            return None, []
        self.intent_lock(workflow.id, intent)
        return workflow, self.reads(then, **values) if then is not None else []

    def reads(self, reads: Reads, /, **values) -> list[list]:
        """The rows of each of ``reads``' querysets for these values (model instances, or a ``values_list``'s
        tuples or values), in order; a store may send them in one round trip, each statement seeing what was
        committed before it ran."""
        return [list(queryset) for queryset in reads.querysets(values)]

    def decision_latency_write(self, run: Run, ms: float) -> None:
        """A new run's trigger latency (docs/decisions.md), written once its trigger has committed."""
        Run.objects.filter(id=run.id, intent=run.intent).update(decision_latency_ms=ms)

    def queued_announce(self, workflow_slug: str) -> None:
        """Tell waiting lease calls, once the transaction commits, that a run of the workflow is queued
        (nothing to tell here: without NOTIFY they poll, ``stateboard.waits``)."""

    def token_read(self, key_hash: str) -> tuple[ApiToken | None, list[str]]:
        """An API token with its user, and the names of the user's groups."""
        token = ApiToken.objects.select_related("user").filter(key_hash=key_hash).first()
        if token is None:
            return None, []
        return token, list(token.user.groups.values_list("name", flat=True))

    def runs_by_id(self, run_id: uuid.UUID, intent: str | None = None):
        """The queryset of the run with this id (``intent``: the run's, when the caller knows it)."""
        return Run.objects.filter(id=run_id)

    def intent_of(self, run_id: uuid.UUID, known: str | None = None) -> str | None:
        """The run's intent: ``known`` when the caller has it, else read (None: no such run)."""
        if known is not None:
            return known
        return Run.objects.filter(id=run_id).values_list("intent", flat=True).first()

    def workflows_agents(self, slugs: list[str]) -> dict[str, list[str]]:
        """{slug: agents} of the workflows among ``slugs`` that exist (the pipeline's ``agents`` hooks)."""
        return dict(Workflow.objects.filter(slug__in=slugs).values_list("slug", "agents"))

    def run_by_trigger_key(self, workflow_slug: str, trigger_key: str) -> Run | None:
        """The run (with its workflow and inputs) a workflow's trigger key made, if any: the key first, then
        the run by id and intent, so one partition is read."""
        found = RunKey.objects.filter(workflow__slug=workflow_slug, trigger_key=trigger_key).values_list(
            "run_id", "intent").first()
        return Run.objects.select_related("workflow").filter(id=found[0], intent=found[1]).first() if found else None

    def run_peek(self, run_id: uuid.UUID) -> Run | None:
        """The run with its workflow, unlocked (a read of the pipeline's: the run's key and ``agents``). Where
        the store ``writes_unless_changed``, it also carries its ``row_version`` for ``run_write``."""
        return self.run_read(run_id, lock=False)

    def run_read(self, run_id: uuid.UUID, *, lock: bool, intent: str | None = None) -> Run | None:
        """The run with its workflow (``inputs`` deferred), locked FOR UPDATE with ``lock``."""
        runs = self.runs_by_id(run_id, intent).select_related("workflow").defer("inputs").order_by()
        if lock:
            runs = runs.select_for_update(of=("self",))
        found = list(runs)
        return found[0] if found else None

    def run_queued_lock(self, *, agent: str, workflows: list[str] | None, now) -> Run | None:
        """The earliest-queued run still in its queue time (of ``workflows``, all when None) whose workflow lets
        ``agent`` (a name) serve it, with its workflow, locked ``FOR UPDATE SKIP LOCKED``: concurrent callers
        each lock a different queued row (or none), so no two receive the same run and none waits."""
        queued = (Run.objects.select_for_update(skip_locked=True, of=("self",)).select_related("workflow")
                  .filter(queued_until__gt=now, state__in=HOLDING_STATES).order_by("queued_at", "id"))
        if workflows:
            queued = queued.filter(workflow__slug__in=workflows)
        refused = [workflow_id for workflow_id, agents in Workflow.objects.exclude(agents=[]).values_list("id", "agents")
                   if agents and agent not in agents]
        if refused:
            queued = queued.exclude(workflow_id__in=refused)
        return queued.first()

    def run_queued_left(self, *, workflow: str, now) -> bool:
        """Whether a run of ``workflow`` is still queued that no transaction is taking right now (a woken
        long-poll that found none asks it before waking the next waiter: ``stateboard.waits``; SQLite, which
        cannot notify, never wakes one, so here it is only the interface's)."""
        return Run.objects.filter(queued_until__gt=now, state__in=HOLDING_STATES, workflow__slug=workflow).exists()

    def run_lock_for_event(self, run_id: uuid.UUID, client_event_id: str | None,
                           intent: str | None = None) -> tuple[Run | None, LedgerEvent | None]:
        """The run locked (as ``run_read``) and the event it already holds with ``client_event_id``, if any."""
        run = self.run_read(run_id, lock=True, intent=intent)
        if run is None or client_event_id is None:
            return run, None
        return run, self.event_by_client_id(run, client_event_id)

    def event_by_client_id(self, run: Run, client_event_id: str) -> LedgerEvent | None:
        found = list(LedgerEvent.objects.of_run(run).filter(client_event_id=client_event_id).order_by()[:1])
        return found[0] if found else None

    def run_insert(self, run: Run, events: list[LedgerEvent], checkpoints: list[Checkpoint]) -> None:
        """A new run with its first events and server checkpoints."""
        run.save(force_insert=True)
        self.rows_write(events, checkpoints)

    def run_write(self, run: Run, changed: list[str], events: list[LedgerEvent],
                  checkpoints: list[Checkpoint], *, unless_changed: str | None = None, spend: tuple | None = None) -> bool:
        """A locked run's new events and checkpoints, and only its changed columns. ``unless_changed``: a row
        version (only where the store ``writes_unless_changed``). ``spend``: (workflow id, day, input tokens,
        output tokens, µ$) the events' usage adds to the workflow's day (SPEC §16)."""
        if unless_changed is not None:
            raise NotImplementedError("This store writes a run only under its lock.")
        self.rows_write(events, checkpoints)
        if changed:  # the intent named, so PostgreSQL reads one partition
            Run.objects.filter(pk=run.pk, intent=run.intent).update(**{name: getattr(run, name) for name in changed})
        if spend is not None:
            with connection.cursor() as cursor:
                cursor.execute(SPEND_UPSERT.format(source="VALUES (%s, %s, %s, %s, %s)"), list(spend))
        return True

    def attributes_q(self, selection: list[tuple[str, tuple]], field: str = "attributes") -> Q:
        """Rows whose attributes (the JSON column ``field``, or a path such as ``run__attributes``) hold, for each
        (key, values) of ``selection``, one of the values (JSON values: 1 never matches ``true``): SQLite's
        JSON_TYPE and JSON_EXTRACT, unindexed."""
        every = Q()
        for key, values in selection:
            kind, match = _json_at(field, key, "JSON_TYPE", CharField()), Q()
            for value in values:
                if isinstance(value, bool):
                    match |= Q(Exact(kind, "true" if value else "false"))
                else:
                    output = IntegerField() if isinstance(value, int) else CharField()
                    match |= Q(Exact(kind, "integer" if isinstance(value, int) else "text"),
                               Exact(_json_at(field, key, "JSON_EXTRACT", output), value))
            every &= match
        return every

    def rows_write(self, events: list[LedgerEvent], checkpoints: list[Checkpoint]) -> None:
        if events:
            LedgerEvent.objects.bulk_create(events)
        if checkpoints:
            Checkpoint.objects.bulk_create(checkpoints)

    def effect_insert(self, effect: Effect) -> bool:
        """Insert a new effect claim and its key; False (nothing written) when the key exists."""
        try:
            with transaction.atomic():
                EffectKey.objects.create(idempotency_key=effect.idempotency_key, intent=effect.intent)
                effect.save(force_insert=True)
        except IntegrityError:
            if not EffectKey.objects.filter(idempotency_key=effect.idempotency_key).exists():
                raise
            return False
        return True


def _json_at(field: str, key: str, function: str, output):
    """``function(field, '$."key"')`` (a key is ``[a-z][a-z0-9_]*``: ``ledger.domain.attributes.KEY``)."""
    return Func(F(field), Value(f'$."{key}"'), function=function, output_field=output)
