"""The store on PostgreSQL: the ORM, plus the intent's advisory lock, a claim without a savepoint, an
append's write in one statement, and the hot path's reads (a run with its workflow, a token with its
user, a run's key) written out as SQL.

The hot statements go through ``cursors.prepared()``: a cursor that binds its parameters on the server, so
psycopg prepares each statement on a connection once it has run there a few times
(``prepare_threshold``) and PostgreSQL stops planning it (planning a statement over sixteen partitions
cost more than running it)."""

from __future__ import annotations

import contextlib
import functools
import itertools
import json

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import DEFAULT_DB_ALIAS, IntegrityError, connection, connections, transaction
from django.db.models import Q

from ledger.models import HOLDING_STATES, ApiToken, Checkpoint, Effect, EffectKey, LedgerEvent, Run, RunKey, Workflow
from ledger.store.cursors import pipelined, prepared
from ledger.store.orm import SPEND_UPSERT, OrmStore
from ledger.store.reads import Reads
from stateboard.waits import CHANNEL

_COMBINATIONS = 16  # the objects one attribute filter's containment ORs at most
_INTENT_OF = f"SELECT intent FROM {RunKey._meta.db_table} WHERE run_id = %s"
_DECISION_LATENCY = f'UPDATE "{Run._meta.db_table}" SET "decision_latency_ms" = %s WHERE "id" = %s AND "intent" = %s'


class PostgresStore(OrmStore):
    writes_unless_changed = True

    def snapshot_begin(self) -> None:
        """The open transaction reads one snapshot (its first statement: REPEATABLE READ)."""
        with connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")

    def intent_lock(self, workflow_id: int, intent: str) -> None:
        """A transaction-level advisory lock on 64 bits of ``hashtextextended(intent, workflow id)``:
        two intents sharing a hash only wait for each other; nothing is ever let through."""
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, %s))", [intent, workflow_id])

    def workflow_read_intent_locked(self, slug: str, intent: str, then: Reads | None = None, /,
                                    **values) -> tuple[Workflow | None, list[list]]:
        """One round trip: the workflow with ``intent_lock``'s lock taken on it, then ``then``'s statements
        (each a statement of its own, so it reads with a snapshot taken once the lock is held)."""
        found, *rows = self._together([(_WORKFLOW_LOCKED, [intent, slug])], then, values)
        if not found:
            return None, []
        return _WORKFLOW.instance(found[0][:-1]), rows

    def reads(self, reads: Reads, /, **values) -> list[list]:
        """One round trip: the statements compiled once (``reads.Compiled``) with these values."""
        return self._together([], reads, values)

    def _together(self, statements: list[tuple[str, list]], reads: Reads | None, values: dict) -> list[list]:
        """The statements, then ``reads``', in one round trip (``_pipelined``; PostgreSQL runs them one after
        another); each one's rows, ``reads``' as their querysets would give them."""
        compiled = reads.compiled() if reads is not None else None
        if compiled is not None:
            statements = [*statements, *compiled.statements_with(reads.checked(values))]
        results = pipelined(statements)
        if compiled is None:
            return results
        mine = len(results) - len(compiled.shapes)
        return results[:mine] + [shape.rows(rows) for shape, rows in zip(compiled.shapes, results[mine:])]

    def token_read(self, key_hash: str) -> tuple[ApiToken | None, list[str]]:
        """One statement: the token, its user and the user's group names (an array subquery)."""
        with prepared() as cursor:
            cursor.execute(_TOKEN_SELECT, [key_hash])
            row = cursor.fetchone()
        if row is None:
            return None, []
        token_end = len(_TOKEN.fields)
        token = _TOKEN.instance(row[:token_end])
        token.user = _USER.instance(row[token_end:-1])
        return token, list(row[-1])

    def runs_by_id(self, run_id, intent: str | None = None):
        """By id and its intent, read first from the run's key unless given: the statement then names the
        intent, so it is planned for the run's one partition (planning all sixteen costs more than the read)."""
        intent = self.intent_of(run_id, intent)
        return Run.objects.filter(id=run_id, intent=intent) if intent is not None else Run.objects.none()

    def intent_of(self, run_id, known: str | None = None) -> str | None:
        """The run's intent: ``known`` when the caller has it, else from its key (a primary-key read of the
        small unpartitioned table)."""
        if known is not None:
            return known
        with prepared() as cursor:
            cursor.execute(_INTENT_OF, [run_id])
            row = cursor.fetchone()
        return row[0] if row else None

    def workflows_agents(self, slugs: list[str]) -> dict[str, list[str]]:
        with prepared() as cursor:
            cursor.execute(_WORKFLOWS_AGENTS, [list(slugs)])
            return {slug: json.loads(agents) for slug, agents in cursor.fetchall()}  # (jsonb comes as text)

    def run_by_trigger_key(self, workflow_slug: str, trigger_key: str) -> Run | None:
        """One statement through the key table."""
        with prepared() as cursor:
            cursor.execute(_BY_TRIGGER_KEY, [workflow_slug, trigger_key])
            row = cursor.fetchone()
        if row is None:
            return None
        run = _RUN_WITH_INPUTS.instance(row[:len(_RUN_WITH_INPUTS.fields)])
        run.workflow = _WORKFLOW.instance(row[len(_RUN_WITH_INPUTS.fields):])
        return run

    def run_peek(self, run_id) -> Run | None:
        """One statement through the run's key: the run with its workflow, unlocked, and its row version."""
        with prepared() as cursor:
            cursor.execute(_RUN_PEEK, [run_id])
            row = cursor.fetchone()
        return _run_of(row, version=True) if row else None

    def run_read(self, run_id, *, lock: bool, intent: str | None = None) -> Run | None:
        intent = self.intent_of(run_id, intent)
        if intent is None:
            return None
        return _run_row(run_id, intent, lock=lock)

    def run_queued_lock(self, *, agent: str, workflows: list[str] | None, now) -> Run | None:
        """One statement (the allow-lists read in it): the earliest-queued run, locked ``SKIP LOCKED``."""
        with prepared() as cursor:
            cursor.execute(_QUEUED_SELECT, [now, list(HOLDING_STATES), workflows or None, workflows or None, agent])
            row = cursor.fetchone()
        return _run_of(row) if row else None

    def run_queued_left(self, *, workflow: str, now) -> bool:
        """One statement: a queued run of ``workflow`` that no transaction is taking (``SKIP LOCKED``)."""
        with prepared() as cursor:
            cursor.execute(_QUEUED_LEFT, [now, list(HOLDING_STATES), workflow])
            return cursor.fetchone() is not None

    def run_lock_for_event(self, run_id, client_event_id: str | None, intent: str | None = None):
        """One statement after the run's key: the run locked, the id of its event with ``client_event_id``
        and its last seq as the statement's snapshot saw them. Under READ COMMITTED that snapshot predates a
        wait for the lock: when another writer appended meanwhile (the seq seen is not the locked row's),
        the lookup is made again."""
        if client_event_id is None:
            return self.run_read(run_id, lock=True, intent=intent), None
        intent = self.intent_of(run_id, intent)
        if intent is None:
            return None, None
        run = _run_row(run_id, intent, lock=True, client_event_id=client_event_id)
        if run is None:
            return None, None
        if (run.seen_seq or 0) != run.event_count:
            return run, self.event_by_client_id(run, client_event_id)
        original = LedgerEvent.objects.get(id=run.original_event_id, intent=intent) if run.original_event_id else None
        return run, original

    def decision_latency_write(self, run: Run, ms: float) -> None:
        with prepared() as cursor:  # (the ORM's update was planned over a partition on every trigger)
            cursor.execute(_DECISION_LATENCY, [ms, run.id, run.intent])

    def queued_announce(self, workflow_slug: str) -> None:
        with connection.cursor() as cursor:  # delivered at commit, dropped on rollback
            cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, workflow_slug])

    def run_write(self, run: Run, changed: list[str], events: list[LedgerEvent],
                  checkpoints: list[Checkpoint], *, unless_changed: str | None = None, spend: tuple | None = None) -> bool:
        """One statement: the events and checkpoints inserted and the run's changed columns updated, as
        data-modifying CTEs (a round trip costs more than the work). Its text depends only on how many rows
        of each and which columns changed, so it is built once per shape and prepared like the reads.
        ``unless_changed``: the run's row version as read without its lock; nothing is written (False) when
        the row is another version now, or when a row breaks a unique key (a repeated ``client_event_id``).
        ``spend``: the events' usage added to the workflow's day in the same statement, after the run's row
        (SPEC §16: every writer locks the run, then the day)."""
        if not events or not changed:
            return False if unless_changed is not None else super().run_write(run, changed, events, checkpoints,
                                                                               spend=spend)
        groups = [objs for objs in (events, checkpoints) if objs]
        db = connections[DEFAULT_DB_ALIAS]
        params = [field.get_db_prep_save(getattr(run, field.attname), db) for field in _run_fields(changed)]
        params += [run.pk, run.intent, *([unless_changed] if unless_changed is not None else [])]
        params += [value for objs in groups for value in _insert_values(objs)]
        params += list(spend or ())
        sql = _write_statement(tuple((type(objs[0]), len(objs)) for objs in groups), tuple(changed),
                               unless_changed is not None, spend is not None)
        guarded_in_transaction = unless_changed is not None and db.in_atomic_block
        try:  # (inside a caller's transaction, a savepoint keeps a refused statement from ending it)
            with transaction.atomic() if guarded_in_transaction else contextlib.nullcontext(), prepared() as cursor:
                cursor.execute(sql, params)
                updated, *ids = cursor.fetchone()
        except IntegrityError:
            if unless_changed is None:
                raise
            return False
        if not updated:
            return False
        for objs, group_ids in zip(groups, ids):
            for obj, pk in zip(objs, group_ids):  # ids of one INSERT grow in the order of its rows
                obj.pk, obj._state.adding, obj._state.db = pk, False, DEFAULT_DB_ALIAS
        return True

    def run_insert(self, run: Run, events: list[LedgerEvent], checkpoints: list[Checkpoint]) -> None:
        """One statement: the new run (its key row comes from the run's insert trigger) with its first events
        and server checkpoints, as data-modifying CTEs, its text built once per shape and prepared."""
        groups = [objs for objs in (events, checkpoints) if objs]
        params = _insert_values([run]) + [value for objs in groups for value in _insert_values(objs)]
        with prepared() as cursor:
            cursor.execute(_insert_statement(tuple((type(objs[0]), len(objs)) for objs in groups)), params)
            ids = cursor.fetchone()
        run._state.adding, run._state.db = False, DEFAULT_DB_ALIAS
        for objs, group_ids in zip(groups, ids):
            for obj, pk in zip(objs, group_ids):  # ids of one INSERT grow in VALUES order
                obj.pk, obj._state.adding, obj._state.db = pk, False, DEFAULT_DB_ALIAS

    def attributes_q(self, selection: list[tuple[str, tuple]], field: str = "attributes") -> Q:
        """Containment of one object per combination of the values (``attributes @> '{"team": "a", "k": 2}' OR
        attributes @> '{"team": "a", "k": "2"}'``), which the GIN index ``run_attributes_gin`` (jsonb_path_ops,
        migration 0025) answers in one probe each, and the planner estimates as one condition (ANDed
        containments were estimated as independent, and a rare pair read in the list's order). A key given
        twice, or more than ``_COMBINATIONS`` objects: a containment per key, ANDed."""
        keys = [key for key, _ in selection]
        combinations = functools.reduce(lambda n, item: n * len(item[1]), selection, 1)
        if len(set(keys)) < len(keys) or combinations > _COMBINATIONS:
            return functools.reduce(lambda q, item: q & self.attributes_q([item], field), selection, Q())
        match = Q()
        for values in itertools.product(*(values for _, values in selection)):
            match |= Q(**{f"{field}__contains": dict(zip(keys, values))})
        return match

    def effect_insert(self, effect: Effect) -> bool:
        """One statement, no savepoint: the key claimed with ``ON CONFLICT DO NOTHING`` (which waits for a
        concurrent claim of it to end), and the effect inserted only when the key was this statement's."""
        fields = [f for f in Effect._meta.concrete_fields if not f.primary_key]
        quote = connection.ops.quote_name
        columns = ", ".join(quote(f.column) for f in fields)
        values = [f.get_db_prep_save(getattr(effect, f.attname), connection) for f in fields]
        with connection.cursor() as cursor:
            cursor.execute(f"WITH k AS (INSERT INTO {quote(EffectKey._meta.db_table)} (idempotency_key, intent) "
                           f"VALUES (%s, %s) ON CONFLICT DO NOTHING RETURNING 1) "
                           f"INSERT INTO {quote(Effect._meta.db_table)} ({columns}) "
                           f"SELECT {', '.join(['%s'] * len(fields))} FROM k RETURNING id",
                           [effect.idempotency_key, effect.intent, *values])
            row = cursor.fetchone()
        if row is None:
            return False
        effect.id, effect._state.adding = row[0], False
        return True


def _inserted_fields(model) -> list:
    """The columns an INSERT names: all but a primary key the database numbers (a run's id is its own)."""
    return [f for f in model._meta.concrete_fields if not (f.primary_key and getattr(f, "db_returning", False))]


def _run_fields(names: list[str]) -> list:
    return [Run._meta.get_field(name) for name in names]


def _insert_values(objs: list) -> list:
    """The values of ``objs`` in ``_write_statement``'s column order, prepared as the ORM's INSERT prepares
    them (``pre_save``, then ``get_db_prep_save``)."""
    fields = _inserted_fields(type(objs[0]))
    db = connections[DEFAULT_DB_ALIAS]
    return [field.get_db_prep_save(field.pre_save(obj, True), db) for obj in objs for field in fields]


@functools.lru_cache(maxsize=256)
def _write_statement(inserts: tuple[tuple[type, int], ...], changed: tuple[str, ...], guarded: bool,
                     spends: bool = False) -> str:
    """``WITH u AS (UPDATE run SET … RETURNING 1), e AS (INSERT …), c AS (…) SELECT`` whether the run was
    updated and the ids of each insert, for ``inserts`` ((model, rows) in the order of their values) and the
    run's ``changed`` columns. ``guarded``: the update also names the row version (``xmin``), and the rows
    are inserted only when it matched (selected from a VALUES list joined to the update, each value cast to
    its column's type, in the list's order). ``spends``: the workflow's day incremented, selected from the
    update (so only when the run was written, and after its row is locked)."""
    quote = connection.ops.quote_name
    sets = ", ".join(f"{quote(field.column)} = %s" for field in _run_fields(list(changed)))
    guard = " AND xmin = %s::xid" if guarded else ""
    ctes = [f"u AS (UPDATE {quote(Run._meta.db_table)} SET {sets} WHERE id = %s AND intent = %s{guard} RETURNING 1)"]
    selected = ["(SELECT count(*) FROM u)"]
    for name, (model, rows) in zip("ec", inserts):
        fields = _inserted_fields(model)
        columns = ", ".join(quote(f.column) for f in fields)
        if guarded:
            names = ", ".join(f"c{i}" for i in range(len(fields)))
            row = ", ".join(f"%s::{f.cast_db_type(connection)}" for f in fields)
            values = ", ".join(f"({n}, {row})" for n in range(rows))
            source = f"SELECT {names} FROM (VALUES {values}) AS v(n, {names}) CROSS JOIN u ORDER BY n"
        else:
            row = "(" + ", ".join(["%s"] * len(fields)) + ")"
            source = "VALUES " + ", ".join([row] * rows)
        ctes.append(f"{name} AS (INSERT INTO {quote(model._meta.db_table)} ({columns}) {source} RETURNING id)")
        selected.append(f"(SELECT array_agg(id ORDER BY id) FROM {name})")
    if spends:
        ctes.append(f"s AS ({SPEND_UPSERT.format(source=_SPEND_SOURCE)})")
    return f"WITH {', '.join(ctes)} SELECT {', '.join(selected)}"


_SPEND_SOURCE = "SELECT %s::integer, %s::varchar, %s::bigint, %s::bigint, %s::bigint FROM u"


@functools.lru_cache(maxsize=64)
def _insert_statement(inserts: tuple[tuple[type, int], ...]) -> str:
    """``WITH r AS (INSERT run), e AS (INSERT …), c AS (…) SELECT`` the ids of each insert after the run's."""
    quote = connection.ops.quote_name
    ctes, selected = [], []
    for name, (model, rows) in zip("rec", ((Run, 1), *inserts)):
        fields = _inserted_fields(model)
        row = "(" + ", ".join(["%s"] * len(fields)) + ")"
        ctes.append(f"{name} AS (INSERT INTO {quote(model._meta.db_table)} ({', '.join(quote(f.column) for f in fields)}) "
                    f"VALUES {', '.join([row] * rows)} RETURNING {'1' if model is Run else 'id'})")
        if model is not Run:
            selected.append(f"(SELECT array_agg(id ORDER BY id) FROM {name})")
    return f"WITH {', '.join(ctes)} SELECT {', '.join(selected) or '1'}"


# The hot paths' reads (a run with its workflow, a token with its user) written out once: building them
# with the ORM cost more Python than the statements cost PostgreSQL. The rows still become model
# instances, each value converted by its field's own ``from_db_value``.

class _Columns:
    """A model's concrete fields (but ``exclude``, left deferred) as a select list and back."""

    def __init__(self, model, alias: str, exclude: tuple[str, ...] = ()):
        self.model = model
        self.fields = [f for f in model._meta.concrete_fields if f.attname not in exclude]
        self.attnames = frozenset(f.attname for f in self.fields)
        self.select = ", ".join(f'{alias}."{f.column}"' for f in self.fields)
        self.table = f'"{model._meta.db_table}" {alias}'

    @functools.cached_property
    def converters(self) -> list[tuple[int, list]]:
        """(position, converters) of the fields whose values need converting (most need none)."""
        return [(i, found) for i, field in enumerate(self.fields) if (found := field.get_db_converters(connection))]

    def instance(self, values):
        values = list(values)
        for i, converters in self.converters:
            for convert in converters:
                values[i] = convert(values[i], self.fields[i], connection)
        return self.model.from_db(DEFAULT_DB_ALIAS, self.attnames, values)


_RUN, _WORKFLOW = _Columns(Run, "r", exclude=("inputs",)), _Columns(Workflow, "w")
_RUN_SELECT = (f'SELECT {_RUN.select}, {_WORKFLOW.select}{{extra}} FROM {_RUN.table} JOIN {_WORKFLOW.table} '
               f'ON w."id" = r."workflow_id" WHERE r."id" = %s AND r."intent" = %s{{lock}}')
_EVENT_LOOKUP = (f', (SELECT e."id" FROM "{LedgerEvent._meta.db_table}" e WHERE e."intent" = %s '
                 f'AND e."run_id" = r."id" AND e."client_event_id" = %s LIMIT 1), '
                 f'(SELECT e."seq" FROM "{LedgerEvent._meta.db_table}" e WHERE e."intent" = %s '
                 f'AND e."run_id" = r."id" ORDER BY e."seq" DESC LIMIT 1)')


_RUN_END = len(_RUN.fields) + len(_WORKFLOW.fields)
_RUN_WITH_INPUTS = _Columns(Run, "r")
_BY_TRIGGER_KEY = (f'SELECT {_RUN_WITH_INPUTS.select}, {_WORKFLOW.select} FROM "{RunKey._meta.db_table}" k '
                   f'JOIN {_WORKFLOW.table} ON w."id" = k."workflow_id" '
                   f'JOIN {_RUN.table} ON r."id" = k."run_id" AND r."intent" = k."intent" '
                   f'WHERE w."slug" = %s AND k."trigger_key" = %s')
_RUN_PEEK = (f'SELECT {_RUN.select}, {_WORKFLOW.select}, r.xmin::text FROM "{RunKey._meta.db_table}" k '
             f'JOIN {_RUN.table} ON r."id" = k."run_id" AND r."intent" = k."intent" '
             f'JOIN {_WORKFLOW.table} ON w."id" = r."workflow_id" WHERE k."run_id" = %s')


def _run_row(run_id, intent: str, *, lock: bool, client_event_id: str | None = None) -> Run | None:
    """The run by id and intent with its workflow, locked FOR UPDATE OF the run with ``lock``; with
    ``client_event_id`` it also carries ``original_event_id`` and ``seen_seq`` (as the statement saw them)."""
    sql = _RUN_SELECT.format(extra=_EVENT_LOOKUP if client_event_id is not None else "",
                             lock=" FOR UPDATE OF r" if lock else "")
    params = [intent, client_event_id, intent] if client_event_id is not None else []  # named: one partition
    with prepared() as cursor:
        cursor.execute(sql, [*params, run_id, intent])
        row = cursor.fetchone()
    if row is None:
        return None
    run = _run_of(row)
    if client_event_id is not None:
        run.original_event_id, run.seen_seq = row[_RUN_END:]
    return run


def _run_of(row, *, version: bool = False) -> Run:
    """A run with its workflow from a row of ``_RUN.select, _WORKFLOW.select`` (``version``: then ``xmin``)."""
    run = _RUN.instance(row[:len(_RUN.fields)])
    run.workflow = _WORKFLOW.instance(row[len(_RUN.fields):_RUN_END])
    if version:
        run.row_version = row[_RUN_END]
    return run


_WORKFLOW_LOCKED = (f'SELECT {_WORKFLOW.select}, pg_advisory_xact_lock(hashtextextended(%s, w."id")) '
                    f'FROM {_WORKFLOW.table} WHERE w."slug" = %s')
_WORKFLOWS_AGENTS = f'SELECT "slug", "agents" FROM "{Workflow._meta.db_table}" WHERE "slug" = ANY(%s)'
_QUEUED_SELECT = (f'SELECT {_RUN.select}, {_WORKFLOW.select} FROM {_RUN.table} JOIN {_WORKFLOW.table} '
                  f'ON w."id" = r."workflow_id" WHERE r."queued_until" > %s AND r."state" = ANY(%s) '
                  f'AND (%s::text[] IS NULL OR w."slug" = ANY(%s::text[])) '
                  f"AND (w.\"agents\" = '[]'::jsonb OR w.\"agents\" ? %s) "
                  f'ORDER BY r."queued_at", r."id" LIMIT 1 FOR UPDATE OF r SKIP LOCKED')
_QUEUED_LEFT = (f'SELECT 1 FROM {_RUN.table} JOIN {_WORKFLOW.table} ON w."id" = r."workflow_id" '
                f'WHERE r."queued_until" > %s AND r."state" = ANY(%s) AND w."slug" = %s '
                f'LIMIT 1 FOR UPDATE OF r SKIP LOCKED')
_User = get_user_model()
_TOKEN, _USER = _Columns(ApiToken, "t"), _Columns(_User, "u")
_USER_GROUPS = _User.groups.through
_TOKEN_SELECT = (f'SELECT {_TOKEN.select}, {_USER.select}, ARRAY(SELECT g."name" FROM "{Group._meta.db_table}" g '
                 f'JOIN "{_USER_GROUPS._meta.db_table}" ug ON ug."group_id" = g."id" WHERE ug."user_id" = u."id") '
                 f'FROM {_TOKEN.table} JOIN {_USER.table} ON u."id" = t."user_id" WHERE t."key_hash" = %s')
