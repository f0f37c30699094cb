"""The run's row as the hot path reads it: the locking read (the run with its workflow, an earlier
``client_event_id``, a cached token's confirmation, in one statement), the duplicate trigger's read, and
the rows ``RunSnapshots`` keeps (``RunRow``, ``WorkflowRow``). ``ledger.sql`` re-exports these names; the
statement machinery they use is there."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from django.db import connection

from ledger import rows, token_sql
from ledger import sql as statements
from ledger.models import LedgerEvent, Run, Workflow
from ledger.sql import _db, _execute, _quote, token_pending
from ledger.sql_reads import _Query, reads


class WorkflowRow:
    """A workflow's row as a locking read returned it, with its version (``xmin``); its Python values are
    converted at the first ``python()`` and kept, so the runs built from ``RunSnapshots`` rows that share it
    (the appends to a run while its workflow stays unchanged) decode its JSON columns once, not at every
    append. The values are shared by the instances built from them: nothing on the append path changes a
    workflow's JSON in place."""

    __slots__ = ("version", "values", "_python")

    def __init__(self, version: str, values: tuple):
        self.version, self.values, self._python = version, values, None

    def python(self, columns, db) -> tuple:
        if self._python is None:  # two threads may both convert: the same values, either kept
            self._python = tuple(rows.python_values(columns, self.values, db))
        return self._python


@dataclass(frozen=True)
class RunRow:
    """A run's row as the database holds it, with its workflow's: the run's version (``xmin``) and its
    columns as a locking read returns them, not yet converted, and the workflow's ``WorkflowRow`` (what
    ``RunSnapshots`` keeps). ``stage_states`` is kept as the writer's value (``stage_states_copy``); the
    write returned its column empty (``_run_row_returning``)."""

    version: str
    values: tuple
    workflow: WorkflowRow
    stage_states: dict

    def run(self) -> Run:
        """The run with its workflow, built as ``run_lock_read`` builds them (``inputs`` deferred)."""
        db = _db()
        _, run_columns, workflow_columns = _run_read_statement(db.vendor, True, False)
        run = rows.from_row(Run, run_columns, self.values, db)
        run.stage_states = stage_states_copy(self.stage_states)
        run.workflow = rows.instance(Workflow, workflow_columns.attnames, self.workflow.python(workflow_columns, db))
        run.workflow_row = self.workflow
        return run


def stage_states_copy(states: dict) -> dict:
    """A run's ``stage_states`` with each stage's entry copied (an entry is one level of names: status,
    pointer, digest, effect key), so the runs built from one kept row share none of it."""
    return {stage: dict(entry) if type(entry) is dict else entry for stage, entry in states.items()}


@functools.cache
def _run_row_returning(vendor: str) -> str:
    """The updated run's version and the columns a locking read returns, for a write's RETURNING; the run's
    ``stage_states`` (kilobytes once a run has passed its stages) comes back NULL: the writer has it, and
    ``RunRow`` keeps its value instead of decoding the column again at every append."""
    _, run_columns, _ = _run_read_statement(vendor, True, False)
    table = _quote(Run._meta.db_table)
    return ", ".join([f"{table}.xmin::text", *("NULL::jsonb" if f.name == "stage_states" else f"{table}.{_quote(f.column)}"
                                                for f, _ in run_columns)])


@functools.cache
def _run_read_statement(vendor: str, lock: bool, client_lookup: bool, by_trigger_key: bool = False,
                        token_check: bool = False, versions: bool = False):
    """Run + workflow, by run id (without the run's inputs) or by (workflow slug, trigger key); with
    ``client_lookup`` also the id of an earlier event with a given client_event_id and the run's last
    seq as of the statement's snapshot; with ``token_check`` also a cached API token's current groups;
    with ``versions`` last the workflow row's version (``xmin``, for ``RunSnapshots``)."""
    run_fields = [f for f in Run._meta.concrete_fields if by_trigger_key or f.name != "inputs"]
    workflow_fields = list(Workflow._meta.concrete_fields)
    events = _quote(LedgerEvent._meta.db_table)
    columns = [f"r.{_quote(f.column)}" for f in run_fields] + [f"w.{_quote(f.column)}" for f in workflow_fields]
    if client_lookup:
        columns += [f"(SELECT e.id FROM {events} e WHERE e.run_id = r.id AND e.client_event_id = %s LIMIT 1)",
                    f"(SELECT e.seq FROM {events} e WHERE e.run_id = r.id ORDER BY e.seq DESC LIMIT 1)"]
    if token_check:
        columns.append(token_sql.token_groups_column())
    if versions:
        columns.append("w.xmin::text")
    sql = (
        f"SELECT {', '.join(columns)} "
        f"FROM {_quote(Run._meta.db_table)} r JOIN {_quote(Workflow._meta.db_table)} w ON w.id = r.workflow_id "
        + ("WHERE w.slug = %s AND r.trigger_key = %s" if by_trigger_key else "WHERE r.id = %s")
        + (" FOR UPDATE OF r" if lock else "")
    )
    return sql, rows.Columns(Run, run_fields), rows.Columns(Workflow, workflow_fields)


def run_lock_read(run_uuid, client_event_id: str | None, *, lock: bool = True):
    """Lock the run row (unless ``lock=False``) and read it with its workflow in one statement:
    (run, id of an earlier event with ``client_event_id``, last seq seen by the statement's snapshot),
    or None if there is no such run. Without ``client_event_id`` the last two are None.

    A cached API token waiting in ``token_to_confirm`` is confirmed by the same statement: if it was
    revoked or its roles changed, TokenChanged is raised before anything is written. A locked run
    carries its workflow's row, as read, with its version as ``run.workflow_row`` (a ``WorkflowRow``, for
    ``RunSnapshots``)."""
    db = _db()
    client_lookup = client_event_id is not None
    pending = token_pending()
    token_check = pending is not None
    sql, run_columns, workflow_columns = _run_read_statement(db.vendor, lock, client_lookup,
                                                             token_check=token_check, versions=lock)
    params = [client_event_id] if client_lookup else []
    if token_check:
        params.append(pending.key_hash)
    with statements._cursor(db=db) as cursor:  # looked up there: the statement counter wraps it
        _execute(cursor, sql, [*params, Run._meta.pk.get_db_prep_value(run_uuid, db)], db=db)
        row = cursor.fetchone()
    workflow_row = None
    if row is not None and lock:
        row, workflow_version = row[:-1], row[-1]
        n = len(run_columns)
        workflow_row = WorkflowRow(workflow_version, tuple(row[n:n + len(workflow_columns)]))
    if row is None:
        if token_check:
            token_sql.token_confirm(pending, token_sql.token_groups_read(pending.key_hash))  # no such run: who asks still counts
        return None
    if token_check:
        token_sql.token_confirm(pending, row[-1])
        row = row[:-1]
    run, rest = _run_with_workflow(row, run_columns, workflow_columns, db)
    if lock:
        run.workflow_row = workflow_row
    return (run, *rest) if client_lookup else (run, None, None)


def _run_with_workflow(row, run_columns, workflow_columns, db=None) -> tuple[Run, tuple]:
    """The run (its workflow attached) from a row of ``_run_read_statement``, and the columns after them."""
    n, m = len(run_columns), len(workflow_columns)
    db = db or _db()
    run = rows.from_row(Run, run_columns, row[:n], db)
    run.workflow = rows.from_row(Workflow, workflow_columns, row[n:n + m], db)
    return run, row[n + m:]


def run_by_trigger_key(workflow_slug: str, trigger_key: str) -> Run | None:
    """The run (with its inputs and workflow) a trigger key made, in one statement, or None (a
    duplicate trigger's only read; ``reads`` confirms a cached API token in the same round trip)."""
    sql, run_columns, workflow_columns = _run_read_statement(connection.vendor, False, False, True)
    found = reads(_Query(sql, [workflow_slug, trigger_key]))[0]
    return _run_with_workflow(found[0], run_columns, workflow_columns)[0] if found else None
