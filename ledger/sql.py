"""The ledger's hot path in hand-written SQL (portable to SQLite); everything else uses the ORM.

An append is one locking read, one write statement and the commit. Building these statements
by hand costs a fraction of the ORM's Python per call, which is what bounds append throughput.
"""

from __future__ import annotations

import functools

from django.db import connection

from ledger.models import LedgerEvent, Run, Workflow


def _quote(name: str) -> str:
    return connection.ops.quote_name(name)


def insert_statement(model, objects: list, *, skip_conflicts: bool = False) -> tuple[str, list]:
    """A multi-row INSERT … RETURNING id for ``objects`` (the primary key comes from the database)."""
    fields = [f for f in model._meta.concrete_fields if not f.primary_key]
    row = "(" + ", ".join(["%s"] * len(fields)) + ")"
    params = [f.get_db_prep_save(getattr(obj, f.attname), connection) for obj in objects for f in fields]
    conflict = " ON CONFLICT DO NOTHING" if skip_conflicts else ""
    sql = (f"INSERT INTO {_quote(model._meta.db_table)} ({', '.join(_quote(f.column) for f in fields)}) "
           f"VALUES {', '.join([row] * len(objects))}{conflict} RETURNING {_quote('id')}")
    return sql, params


def _assign_ids(objects: list, ids: list) -> None:
    if len(ids) == len(objects):
        for obj, pk in zip(objects, sorted(ids)):  # ids of one statement grow in VALUES order
            obj.id, obj._state.adding = pk, False


def rows_insert(model, objects: list, *, skip_conflicts: bool = False) -> int:
    """Insert ``objects`` in one statement and set their ids. With ``skip_conflicts``, rows that hit a
    unique constraint are skipped (``ON CONFLICT DO NOTHING``) and keep ``id=None``; returns how many
    rows were inserted."""
    if not objects:
        return 0
    sql, params = insert_statement(model, objects, skip_conflicts=skip_conflicts)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        ids = [row[0] for row in cursor.fetchall()]
    _assign_ids(objects, ids)
    return len(ids)


def _run_update_statement(run: Run, changed: list[str]) -> tuple[str, list]:
    fields = [Run._meta.get_field(name) for name in changed]
    assignments = ", ".join(f"{_quote(f.column)} = %s" for f in fields)
    params = [f.get_db_prep_save(getattr(run, f.attname), connection) for f in fields]
    sql = f"UPDATE {_quote(Run._meta.db_table)} SET {assignments} WHERE {_quote('id')} = %s"
    return sql, [*params, Run._meta.pk.get_db_prep_value(run.pk, connection)]


def events_and_run_write(events: list[LedgerEvent], run: Run, changed: list[str]) -> None:
    """Insert the events and UPDATE only the run's changed columns (so a plain append stays a HOT
    update). On PostgreSQL both go in one statement (a data-modifying CTE): one round trip."""
    if events and changed and connection.vendor == "postgresql":
        insert_sql, insert_params = insert_statement(LedgerEvent, events)
        update_sql, update_params = _run_update_statement(run, changed)
        with connection.cursor() as cursor:
            cursor.execute(f"WITH inserted AS ({insert_sql}) {update_sql} "
                           f"RETURNING (SELECT array_agg(id) FROM inserted)", [*insert_params, *update_params])
            _assign_ids(events, cursor.fetchone()[0])
        return
    rows_insert(LedgerEvent, events)
    if changed:
        sql, params = _run_update_statement(run, changed)
        with connection.cursor() as cursor:
            cursor.execute(sql, params)


def _converted(model, fields) -> list:
    """(field, [converters]) pairs that turn raw database values into Python ones, as the ORM does."""
    table = model._meta.db_table
    return [(f, connection.ops.get_db_converters(f.get_col(table)) + f.get_db_converters(connection)) for f in fields]


def from_row(model, converted, values):
    python_values = []
    for (f, converters), value in zip(converted, values):
        for convert in converters:
            value = convert(value, f.get_col(model._meta.db_table), connection)
        python_values.append(value)
    return model.from_db(connection.alias, [f.attname for f, _ in converted], python_values)


@functools.cache
def _lock_statement(vendor: str):
    """Run (without its inputs) + workflow, the id of an earlier event with a given client_event_id,
    and the run's last seq as of the statement's snapshot."""
    run_fields = [f for f in Run._meta.concrete_fields if f.name != "inputs"]
    workflow_fields = list(Workflow._meta.concrete_fields)
    events = _quote(LedgerEvent._meta.db_table)
    columns = [f"r.{_quote(f.column)}" for f in run_fields] + [f"w.{_quote(f.column)}" for f in workflow_fields]
    sql = (
        f"SELECT {', '.join(columns)}, "
        f"(SELECT e.id FROM {events} e WHERE e.run_id = r.id AND e.client_event_id = %s LIMIT 1), "
        f"(SELECT e.seq FROM {events} e WHERE e.run_id = r.id ORDER BY e.seq DESC LIMIT 1) "
        f"FROM {_quote(Run._meta.db_table)} r JOIN {_quote(Workflow._meta.db_table)} w ON w.id = r.workflow_id "
        f"WHERE r.id = %s" + (" FOR UPDATE OF r" if connection.features.has_select_for_update else "")
    )
    return sql, _converted(Run, run_fields), _converted(Workflow, workflow_fields)


def run_lock_read(run_uuid, client_event_id: str | None) -> tuple[Run, int | None, int | None] | None:
    """Lock the run row and read it with its workflow in one statement: (run, id of an event with
    ``client_event_id``, last seq seen by the statement's snapshot), or None if there is no such run."""
    sql, run_columns, workflow_columns = _lock_statement(connection.vendor)
    with connection.cursor() as cursor:
        cursor.execute(sql, [client_event_id, Run._meta.pk.get_db_prep_value(run_uuid, connection)])
        row = cursor.fetchone()
    if row is None:
        return None
    n = len(run_columns)
    run = from_row(Run, run_columns, row[:n])
    run.workflow = from_row(Workflow, workflow_columns, row[n:n + len(workflow_columns)])
    return run, row[-2], row[-1]
