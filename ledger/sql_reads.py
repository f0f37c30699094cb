"""Several reads in one round trip (``reads``): a message of prepared statements, PostgreSQL running them
in order, each with its own snapshot, each answered as if it ran alone; an intent's advisory lock among
them makes the reads after it see what the lock's previous holder committed. ``ledger.sql`` re-exports
these names; the statement machinery they use (preparing, binding, the token confirmation) is there."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from ledger import rows
from ledger.sql import _cursor, _db, _execute, _execute_many, _quote, available, token_pending


def intent_advisory_lock(workflow_id: int, intent: str) -> None:
    """A transaction-level advisory lock on (workflow, intent): 64 bits of ``hashtextextended(intent,
    workflow id)``. Two intents sharing a hash only wait for each other; nothing is ever let through."""
    reads(IntentLock(workflow_id, intent))


@functools.lru_cache(maxsize=512)
def _select_statement(model, field_names: tuple, where: str, order: str, limit: int | None, lock: bool, vendor: str):
    fields = [model._meta.get_field(name) for name in field_names]
    sql = (f"SELECT {', '.join(_quote(f.column) for f in fields)} FROM {_quote(model._meta.db_table)} "
           f"WHERE {where}" + (f" ORDER BY {order}" if order else "") + (f" LIMIT {int(limit)}" if limit else "")
           + (" FOR UPDATE" if lock else ""))
    return sql, rows.Columns(model, fields)


@dataclass(frozen=True)
class Rows:
    """One read for ``reads``: the rows of ``model`` matching ``where`` (its ``%s`` bound to ``params``),
    as tuples of ``fields`` converted as the ORM would, or without ``fields`` as model instances (all
    concrete fields); ``lock``: FOR UPDATE (PostgreSQL)."""

    model: type
    where: str
    params: list
    fields: tuple = ()
    order: str = ""
    limit: int | None = None
    lock: bool = False

    def statement(self, db) -> tuple[str, list, object]:
        names = self.fields or tuple(f.name for f in self.model._meta.concrete_fields)
        sql, converted = _select_statement(self.model, names, self.where, self.order, self.limit,
                                           self.lock and available(), db.vendor)
        return sql, self.params, functools.partial(self._converted_rows, converted)

    def _converted_rows(self, converted, found, db) -> list:
        values = [tuple(rows.python_values(converted, row, db)) for row in found]
        if self.fields:
            return values
        return [rows.instance(self.model, converted.attnames, row) for row in values]


@dataclass(frozen=True)
class IntentLock:
    """For ``reads``: wait for the transaction-level lock of (workflow, intent) (``intent_advisory_lock``);
    the reads after it in the same call see what the lock's previous holder committed."""

    workflow_id: int
    intent: str

    def statement(self, db) -> tuple[str, list, object] | None:
        if not available():
            return None  # the embedded SQLite has one writer at a time
        return _INTENT_LOCK, [self.intent, self.workflow_id], lambda found, db: []


_INTENT_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended(%s, %s))"


@dataclass(frozen=True)
class _Query:
    """For ``reads``: one statement's rows as the database returns them."""

    sql: str
    params: list

    def statement(self, db) -> tuple[str, list, object]:
        return self.sql, self.params, lambda found, db: found


def reads(*specs) -> list[list]:
    """Run ``specs`` (``Rows``, ``IntentLock``) in order in one round trip (one message of prepared
    statements on PostgreSQL); returns each one's rows. A cached API token waiting in ``token_to_confirm``
    is confirmed in the same message (``TokenChanged`` once the reads are done)."""
    db = _db()
    planned = [spec.statement(db) for spec in specs]
    statements = [p for p in planned if p is not None]
    results = []
    with _cursor(write_path=False, db=db) as cursor:
        if not available():
            for query, params, convert in statements:
                _execute(cursor, query, params, db=db)
                results.append(convert(cursor.fetchall(), db))
        elif statements:
            pending = token_pending()
            sent = [(query, params) for query, params, _ in statements]
            _execute_many(cursor, sent if pending is None else [*sent, token_sql.token_groups_statement(pending)],
                          db=db)
            for n, (_, _, convert) in enumerate(statements):
                if n:
                    cursor.nextset()
                results.append(convert(cursor.fetchall(), db))
            if pending is not None:
                cursor.nextset()
                token_sql.token_confirm(pending, cursor.fetchone()[0])
    found = iter(results)
    return [[] if p is None else next(found) for p in planned]


def statements_in(message: str) -> list[str]:
    """The statements of one message ``reads`` sent (as query logs show it), split at the semicolons outside
    quoted literals (psycopg doubles a quote inside one, so every quote toggles): for EXPLAIN and counts."""
    statements, start, quoted = [], 0, False
    for i, char in enumerate(message):
        if char == "'":
            quoted = not quoted
        elif char == ";" and not quoted:
            statements.append(message[start:i].strip())
            start = i + 1
    statements.append(message[start:].strip())
    return [statement for statement in statements if statement]


def select_rows(model, field_names: list[str], where: str, params: list, *, order: str = "",
                limit: int | None = None, lock: bool = False) -> list[tuple]:
    """Values of ``field_names`` for the rows matching ``where``, converted as the ORM would
    (the recovery decision's reads: a few indexed lookups, without the ORM's per-query Python);
    ``lock``: FOR UPDATE (PostgreSQL)."""
    return reads(Rows(model, where, params, tuple(field_names), order, limit, lock))[0]


def select_models(model, where: str, params: list, *, order: str = "", limit: int | None = None,
                  lock: bool = False) -> list:
    """Model instances for the rows matching ``where`` (all concrete fields)."""
    return reads(Rows(model, where, params, (), order, limit, lock))[0]


from ledger import token_sql  # noqa: E402
