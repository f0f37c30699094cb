"""The store on PostgreSQL: the ORM, plus the intent's advisory lock, a claim without a savepoint, an
append's write in one statement, and the hot path's two reads (a run with its workflow, a token with
its user) written out as SQL."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import DEFAULT_DB_ALIAS, connection
from django.db.models.sql import InsertQuery, UpdateQuery

from ledger.models import ApiToken, Checkpoint, Effect, EffectKey, LedgerEvent, Run, RunKey, Workflow
from ledger.store.orm import OrmStore
from stateboard.waits import CHANNEL


_INTENT_OF = f"SELECT intent FROM {RunKey._meta.db_table} WHERE run_id = %s"


class PostgresStore(OrmStore):
    def snapshot_begin(self) -> None:
        """The open transaction reads one snapshot (its first statement: REPEATABLE READ)."""
        with connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")

    def intent_lock(self, workflow_id: int, intent: str) -> None:
        """A transaction-level advisory lock on 64 bits of ``hashtextextended(intent, workflow id)``:
        two intents sharing a hash only wait for each other; nothing is ever let through."""
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, %s))", [intent, workflow_id])

    def token_read(self, key_hash: str) -> tuple[ApiToken | None, list[str]]:
        """One statement: the token, its user and the user's group names (an array subquery)."""
        with connection.cursor() as cursor:
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
        intent = self._intent_of(run_id, intent)
        return Run.objects.filter(id=run_id, intent=intent) if intent is not None else Run.objects.none()

    def _intent_of(self, run_id, known: str | None = None) -> str | None:
        """The run's intent: ``known`` when the caller has it, else from its key (a primary-key read of the
        small unpartitioned table)."""
        if known is not None:
            return known
        with connection.cursor() as cursor:
            cursor.execute(_INTENT_OF, [run_id])
            row = cursor.fetchone()
        return row[0] if row else None

    def run_read(self, run_id, *, lock: bool, intent: str | None = None) -> Run | None:
        intent = self._intent_of(run_id, intent)
        if intent is None:
            return None
        return _run_row(run_id, intent, lock=lock)

    def run_lock_for_event(self, run_id, client_event_id: str | None, intent: str | None = None):
        """One statement after the run's key: the run locked, the id of its event with ``client_event_id``
        and its last seq as the statement's snapshot saw them. Under READ COMMITTED that snapshot predates a
        wait for the lock: when another writer appended meanwhile (the seq seen is not the locked row's),
        the lookup is made again."""
        if client_event_id is None:
            return self.run_read(run_id, lock=True, intent=intent), None
        intent = self._intent_of(run_id, intent)
        if intent is None:
            return None, None
        run = _run_row(run_id, intent, lock=True, client_event_id=client_event_id)
        if run is None:
            return None, None
        if (run.seen_seq or 0) != run.event_count:
            return run, self.event_by_client_id(run, client_event_id)
        original = LedgerEvent.objects.get(id=run.original_event_id, intent=intent) if run.original_event_id else None
        return run, original

    def queued_announce(self, workflow_slug: str) -> None:
        with connection.cursor() as cursor:  # delivered at commit, dropped on rollback
            cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, workflow_slug])

    def run_write(self, run: Run, changed: list[str], events: list[LedgerEvent],
                  checkpoints: list[Checkpoint]) -> None:
        """One statement: the events and checkpoints inserted and the run's changed columns updated, as
        data-modifying CTEs of the ORM's own INSERT and UPDATE (a round trip costs more than the work)."""
        if not events or not changed:
            return super().run_write(run, changed, events, checkpoints)
        ctes, params, groups = [], [], []
        for name, objs in (("e", events), ("c", checkpoints)):
            if objs:
                insert_sql, insert_params = _insert_statement(type(objs[0]), objs)
                ctes.append(f"{name} AS ({insert_sql})")
                params += insert_params
                groups.append((name, objs))
        update = UpdateQuery(Run)
        update.add_update_values({name: getattr(run, name) for name in changed})
        update.add_filter("pk", run.pk)
        update.add_filter("intent", run.intent)
        update_sql, update_params = update.get_compiler(DEFAULT_DB_ALIAS).as_sql()
        returning = ", ".join(f"(SELECT array_agg(id ORDER BY id) FROM {name})" for name, _ in groups)
        with connection.cursor() as cursor:
            cursor.execute(f"WITH {', '.join(ctes)} {update_sql} RETURNING {returning}", [*params, *update_params])
            ids = cursor.fetchone()
        for (_, objs), group_ids in zip(groups, ids):
            for obj, pk in zip(objs, group_ids):  # ids of one INSERT grow in VALUES order
                obj.pk, obj._state.adding, obj._state.db = pk, False, DEFAULT_DB_ALIAS

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


def _insert_statement(model, objs: list) -> tuple[str, tuple]:
    """The ORM's multi-row INSERT … RETURNING id for ``objs`` (what ``bulk_create`` sends)."""
    query = InsertQuery(model)
    query.insert_values([f for f in model._meta.concrete_fields if not f.primary_key], objs)
    compiler = query.get_compiler(DEFAULT_DB_ALIAS)
    compiler.returning_fields = [model._meta.pk]
    [(sql, params)] = compiler.as_sql()
    return sql, tuple(params)


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

    def instance(self, values):
        converted = []
        for field, value in zip(self.fields, values):
            for convert in field.get_db_converters(connection):
                value = convert(value, field, connection)
            converted.append(value)
        return self.model.from_db(DEFAULT_DB_ALIAS, self.attnames, converted)


_RUN, _WORKFLOW = _Columns(Run, "r", exclude=("inputs",)), _Columns(Workflow, "w")
_RUN_SELECT = (f'SELECT {_RUN.select}, {_WORKFLOW.select}{{extra}} FROM {_RUN.table} JOIN {_WORKFLOW.table} '
               f'ON w."id" = r."workflow_id" WHERE r."id" = %s AND r."intent" = %s{{lock}}')
_EVENT_LOOKUP = (f', (SELECT e."id" FROM "{LedgerEvent._meta.db_table}" e WHERE e."intent" = %s '
                 f'AND e."run_id" = r."id" AND e."client_event_id" = %s LIMIT 1), '
                 f'(SELECT e."seq" FROM "{LedgerEvent._meta.db_table}" e WHERE e."intent" = %s '
                 f'AND e."run_id" = r."id" ORDER BY e."seq" DESC LIMIT 1)')


def _run_row(run_id, intent: str, *, lock: bool, client_event_id: str | None = None) -> Run | None:
    """The run by id and intent with its workflow, locked FOR UPDATE OF the run with ``lock``; with
    ``client_event_id`` it also carries ``original_event_id`` and ``seen_seq`` (as the statement saw them)."""
    sql = _RUN_SELECT.format(extra=_EVENT_LOOKUP if client_event_id is not None else "",
                             lock=" FOR UPDATE OF r" if lock else "")
    params = [intent, client_event_id, intent] if client_event_id is not None else []  # named: one partition
    with connection.cursor() as cursor:
        cursor.execute(sql, [*params, run_id, intent])
        row = cursor.fetchone()
    if row is None:
        return None
    run_end = len(_RUN.fields)
    workflow_end = run_end + len(_WORKFLOW.fields)
    run = _RUN.instance(row[:run_end])
    run.workflow = _WORKFLOW.instance(row[run_end:workflow_end])
    if client_event_id is not None:
        run.original_event_id, run.seen_seq = row[workflow_end:]
    return run


_User = get_user_model()
_TOKEN, _USER = _Columns(ApiToken, "t"), _Columns(_User, "u")
_USER_GROUPS = _User.groups.through
_TOKEN_SELECT = (f'SELECT {_TOKEN.select}, {_USER.select}, ARRAY(SELECT g."name" FROM "{Group._meta.db_table}" g '
                 f'JOIN "{_USER_GROUPS._meta.db_table}" ug ON ug."group_id" = g."id" WHERE ug."user_id" = u."id") '
                 f'FROM {_TOKEN.table} JOIN {_USER.table} ON u."id" = t."user_id" WHERE t."key_hash" = %s')
