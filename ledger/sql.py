"""The ledger's hot path in hand-written SQL, PostgreSQL only; everything else uses the ORM.

An append is one locking read, one write statement and the commit. Building these statements
by hand costs a fraction of the ORM's Python per call, which is what bounds append throughput
(``bench ledger`` measures it). The embedded SQLite demo takes the plain ORM path: callers check
``available()``.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import re
from dataclasses import dataclass
from datetime import timezone as dt_timezone

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction
from django.db.transaction import TransactionManagementError
from psycopg.adapt import Transformer
from psycopg.pq import TransactionStatus
from psycopg.types.datetime import TimestamptzLoader

from ledger import rows
from ledger.models import Checkpoint, Effect, LedgerEvent, Run, Workflow


@functools.cache
def available() -> bool:
    """Whether the hand-written statements apply (the product database, PostgreSQL)."""
    return connection.vendor == "postgresql"


def _db():
    """The default database's wrapper itself: each use of ``django.db.connection`` is a lookup of it
    (a thread-local read that costs about a microsecond), so a hot function reads it once and passes it
    on (the ``db`` arguments below)."""
    return connections[DEFAULT_DB_ALIAS]


def _cursor(*, write_path: bool = True, db=None):
    """For the append path, psycopg's own cursor on Django's connection (same transaction), without
    Django's cursor wrapper: one per connection, reused (``_write_cursor``). Reads use Django's cursor,
    so they stay visible to query logging, query-count tests and EXPLAIN captures."""
    db = db or _db()
    if write_path:
        db.ensure_connection()
        return contextlib.nullcontext(_write_cursor(db, db.connection))
    return db.cursor()


def _write_cursor(db, raw):
    """The connection's hot-path cursor, made once. Its timestamps are parsed by psycopg's own C loader:
    Django's loader (a Python subclass of it that pins the tzinfo) gives the same values when both the
    session and Django use UTC, at several times the cost per column."""
    cursor = raw.__dict__.get("_stateboard_cursor")
    if cursor is None or cursor.closed:
        cursor = raw.cursor()
        if db.timezone is dt_timezone.utc and raw.info.parameter_status("TimeZone") == "UTC":
            cursor.adapters.register_loader("timestamptz", TimestamptzLoader)
        raw.__dict__["_stateboard_cursor"] = cursor
    return cursor


def _quote(name: str) -> str:
    return connection.ops.quote_name(name)


PREPARED_PER_CONNECTION = 200
_IDLE = TransactionStatus.IDLE


@functools.lru_cache(maxsize=1024)
def _prepared_name(query: str) -> str:
    return "sb_" + hashlib.sha1(query.encode()).hexdigest()[:20]


def _execute(cursor, query: str, params, *, commit: bool = False, db=None) -> None:
    """Run one of the hot statements as a prepared statement of this connection: PostgreSQL plans it
    once per connection (``PREPARE``, at its first use) instead of at every call. Parameters are bound on
    the client (``EXECUTE name(<literals>)``, ``_bound``); a prepared statement outlives a rollback.
    Measured: the run's locking read took 0.53 ms of server CPU planned each time, 0.22 ms prepared
    (psycopg's own server-side prepared statements measured no better than no preparing at all).
    Database errors come out as Django's (an IntegrityError is ``django.db.IntegrityError``)."""
    db = db or _db()
    if not available():  # SQLite runs the shared reads as they are
        with db.wrap_database_errors:
            cursor.execute(query, params)
        return
    _execute_many(cursor, [(query, params)], commit=commit, db=db)


def _execute_many(cursor, statements: list[tuple[str, list]], *, commit: bool = False, db=None) -> None:
    """``_execute`` for several statements sent as one message (one round trip; PostgreSQL runs them in
    order, each with its own snapshot); the cursor's first result is the first statement's, ``nextset``
    moves on."""
    if _speculating.get():
        raise Speculative(statements[0][0])
    db = db or _db()
    with db.wrap_database_errors:
        raw = db.connection
        bound = []
        for query, params in statements:
            if settings.DB_PREPARED_STATEMENTS:
                query, params = _prepared(raw, query, params)
            bound.append(_bound(raw, query, params))
        _execute_folded(raw, cursor, b"; ".join(bound), commit=commit and _commit_foldable(db))


def _prepared(raw, query: str, params) -> tuple[str, list]:
    """``EXECUTE name(%s, ...)`` for ``query``, prepared on this connection at its first use."""
    prepared = raw.__dict__.setdefault("_stateboard_prepared", set())
    name = _prepared_name(query)
    if name not in prepared:
        if len(prepared) >= PREPARED_PER_CONNECTION:
            return query, params
        count = iter(range(1, 10_000))
        body = re.sub(r"%[s%]", lambda m: f"${next(count)}" if m.group() == "%s" else "%", query)  # %% is a %
        with raw.cursor() as plain, _no_begin_of_psycopgs(raw):  # a one-time statement, not in Django's log
            plain.execute(f"PREPARE {name} AS {body}")
        prepared.add(name)
    return _execute_text(name, len(params)), params


@functools.lru_cache(maxsize=1024)
def _execute_text(name: str, count: int) -> str:
    return f"EXECUTE {name}" + (f"({', '.join(['%s'] * count)})" if count else "")


@functools.lru_cache(maxsize=1024)
def _query_pieces(query: str, encoding: str) -> tuple[bytes, ...]:
    """``query`` split at its ``%s`` placeholders (``%%`` is a %), encoded: what psycopg's client-side
    binding computes, kept here for every statement (psycopg keeps it only for queries of at most 50
    parameters, so a new run's insert or a batch of events was parsed again at every call)."""
    pieces, current = [], []
    for token in re.split(r"(%%|%s)", query):
        if token == "%s":
            pieces.append("".join(current).encode(encoding))
            current = []
        else:
            current.append("%" if token == "%%" else token)
    pieces.append("".join(current).encode(encoding))
    return tuple(pieces)


def _bound(raw, query: str, params) -> bytes:
    """``query`` with ``params`` as SQL literals, quoted as psycopg's client-side binding quotes them (one
    transformer per connection, so its dumpers are looked up once)."""
    pieces = _query_pieces(query, raw.info.encoding)
    if len(pieces) != len(params) + 1:
        raise TypeError(f"The query has {len(pieces) - 1} placeholders but {len(params)} parameters were passed.")
    transformer = raw.__dict__.get("_stateboard_transformer")
    if transformer is None:
        transformer = raw.__dict__["_stateboard_transformer"] = Transformer.from_context(raw)
    literal = transformer.as_literal
    out = [pieces[0]]
    for value, piece in zip(params, pieces[1:]):
        out.append(b"NULL" if value is None else literal(value))
        out.append(piece)
    return b"".join(out)


def _execute_folded(raw, cursor, query: bytes, *, commit: bool) -> None:
    """Send the transaction's BEGIN (when this is its first statement) and, with ``commit``, its COMMIT
    in the same message as ``query`` (its parameters already bound): one round trip instead of up to
    three. psycopg would send its BEGIN on its own before the first statement; it is told not to for
    this one call."""
    begin = not raw.autocommit and raw.pgconn.transaction_status == _IDLE
    if not begin and not commit:
        cursor.execute(query)
        return
    text = (raw._get_tx_start_command() + b"; " if begin else b"") + query + (b"; COMMIT" if commit else b"")
    with _no_begin_of_psycopgs(raw):
        cursor.execute(text)
    if begin:
        cursor.nextset()  # past BEGIN's empty result, to the query's rows


@contextlib.contextmanager
def _no_begin_of_psycopgs(raw):
    """psycopg sends a BEGIN of its own before the first statement of a transaction, a round trip by
    itself; within this block it does not (the statement brings its own, or needs none, like PREPARE)."""
    if raw.autocommit:
        yield
        return
    raw._autocommit = True
    try:
        yield
    finally:
        raw._autocommit = False


def _commit_foldable(db) -> bool:
    """Whether the statement about to run may commit the transaction: the only open atomic block is the
    one ``write_transaction`` opened (so it is the outermost, with nothing nested in it) and nothing
    marked it for rollback."""
    return db.atomic_blocks == [_own_transaction.get()] and not db.needs_rollback


_own_transaction: contextvars.ContextVar = contextvars.ContextVar("stateboard_own_transaction", default=None)


class Speculative(Exception):
    """A statement was about to be sent while work was computed from a run snapshot (``speculation``)."""


_speculating: contextvars.ContextVar = contextvars.ContextVar("stateboard_speculating", default=False)


@contextlib.contextmanager
def speculation():
    """Within it every statement, Django's and these alike, raises Speculative before it is sent: what is
    computed here from a run snapshot read nothing and wrote nothing (``services.events``). It runs outside
    any transaction block, so a locking read (``select_for_update``) is refused by Django before it is
    built: that too is a statement the rules wanted, and raises Speculative. (Outside a transaction block,
    ``transaction.on_commit`` runs its callback at once: the rules register theirs after a statement, as
    every one does today, so a speculation never gets that far.)"""
    token = _speculating.set(True)
    try:
        with _db().execute_wrapper(_statement_refused):
            yield
    except TransactionManagementError as exc:
        raise Speculative(str(exc)) from exc
    finally:
        _speculating.reset(token)


def speculating() -> bool:
    """Within ``speculation``: a write the rules would make goes with the snapshot's statement instead."""
    return _speculating.get()


def _statement_refused(execute, sql, params, many, context):
    raise Speculative(sql)


def outermost() -> bool:
    """No transaction is open on the connection (no atomic block), so a ``write_transaction`` here is the
    outermost and its last statement may carry the COMMIT."""
    return not _db().in_atomic_block


@contextlib.contextmanager
def write_transaction():
    """``transaction.atomic()`` for one ledger write whose last statement may carry the COMMIT
    (``commit=True`` on that statement); nested in another block it is a plain atomic."""
    block = transaction.atomic()
    with block:
        token = _own_transaction.set(block)
        try:
            yield
        finally:
            _own_transaction.reset(token)


@functools.cache
def _insert_sql(model, count: int, skip_conflicts: bool, vendor: str, returning: tuple = ("id",)) -> tuple[str, tuple]:
    """The INSERT of ``count`` rows of ``model`` and the preps of its columns (``rows.save_preps``)."""
    fields = tuple(f for f in model._meta.concrete_fields if not (f.primary_key and _auto_pk(model)))
    row = "(" + ", ".join(["%s"] * len(fields)) + ")"
    conflict = " ON CONFLICT DO NOTHING" if skip_conflicts else ""
    sql = (f"INSERT INTO {_quote(model._meta.db_table)} ({', '.join(_quote(f.column) for f in fields)}) "
           f"VALUES {', '.join([row] * count)}{conflict} RETURNING {', '.join(_quote(c) for c in returning)}")
    return sql, rows.save_preps(fields)


def _auto_pk(model) -> bool:
    return model._meta.pk.get_internal_type() in ("AutoField", "BigAutoField", "SmallAutoField")


def insert_statement(model, objects: list, *, skip_conflicts: bool = False, db=None,
                     returning: tuple = ("id",), guarded: bool = False) -> tuple[str, list]:
    """A multi-row INSERT … RETURNING id (or the ``returning`` columns) for ``objects`` (an auto primary
    key comes from the database, any other, like a run's UUID, from the objects). ``guarded``: the rows
    are inserted only if the statement's ``guard`` CTE found its row (``events_and_run_write``)."""
    db = db or _db()
    if guarded:
        sql, preps = _guarded_insert_sql(model, len(objects), db.vendor, returning)
    else:
        sql, preps = _insert_sql(model, len(objects), skip_conflicts, db.vendor, returning)
    return sql, rows.save_values(preps, objects, db)


@functools.cache
def _guarded_insert_sql(model, count: int, vendor: str, returning: tuple) -> tuple[str, tuple]:
    """``_insert_sql`` as INSERT … SELECT from typed VALUES, where the ``guard`` CTE has a row."""
    fields = tuple(f for f in model._meta.concrete_fields if not (f.primary_key and _auto_pk(model)))
    row = "(" + ", ".join(f"%s::{f.db_type(connection)}" for f in fields) + ")"
    sql = (f"INSERT INTO {_quote(model._meta.db_table)} ({', '.join(_quote(f.column) for f in fields)}) "
           f"SELECT * FROM (VALUES {', '.join([row] * count)}) AS v WHERE EXISTS (SELECT 1 FROM guard) "
           f"RETURNING {', '.join(_quote(c) for c in returning)}")
    return sql, rows.save_preps(fields)


def _assign_ids(objects: list, ids: list) -> None:
    if objects and not _auto_pk(type(objects[0])):
        for obj in objects:
            obj._state.adding = False
    elif len(ids) == len(objects):
        for obj, pk in zip(objects, sorted(ids)):  # ids of one statement grow in VALUES order
            obj.id, obj._state.adding = pk, False


def rows_insert_all(groups: list[tuple], *, commit: bool = False) -> None:
    """Insert several ``(model, objects)`` groups in one statement (data-modifying CTEs) and set their
    ids: a new run with its first events and checkpoints in one round trip. Foreign keys between the
    groups are checked at commit (they are deferred). ``commit``: as for ``events_and_run_write``."""
    groups = [(model, list(objects)) for model, objects in groups if objects]
    if not groups:
        return
    ctes, params = [], []
    for n, (model, objects) in enumerate(groups):
        insert_sql, insert_params = insert_statement(model, objects)
        ctes.append(f"i{n} AS ({insert_sql})")
        params += insert_params
    selects = ", ".join(f"(SELECT array_agg(id) FROM i{n})" for n in range(len(groups)))
    with _cursor() as cursor:
        _execute(cursor, f"WITH {', '.join(ctes)} SELECT {selects}", params, commit=commit)
        ids = cursor.fetchone()
    for (_, objects), group_ids in zip(groups, ids):
        _assign_ids(objects, group_ids or [])


def rows_insert(model, objects: list, *, skip_conflicts: bool = False) -> int:
    """Insert ``objects`` in one statement and set their ids. With ``skip_conflicts``, rows that hit a
    unique constraint are skipped (``ON CONFLICT DO NOTHING``) and keep ``id=None``; returns how many
    rows were inserted."""
    if not objects:
        return 0
    sql, params = insert_statement(model, objects, skip_conflicts=skip_conflicts)
    with _cursor() as cursor:
        _execute(cursor, sql, params)
        ids = [row[0] for row in cursor.fetchall()]
    _assign_ids(objects, ids)
    return len(ids)


# A run's counters repeat its last event's own columns; in the one-statement write they are read from
# the inserted row instead of being sent (and bound) a second time.
_RUN_FROM_LAST_EVENT = {"event_count": "seq", "last_hash": "hash", "updated_at": "at"}
_LAST_EVENT = "last_event"


@functools.cache
def _run_update_sql(changed: tuple[str, ...], vendor: str, from_last: tuple[str, ...] = (),
                    guarded: bool = False, merged: tuple[str, ...] = ()) -> tuple[str, tuple]:
    """UPDATE of the run's ``changed`` columns; those in ``from_last`` are taken from the last row of the
    ``inserted`` CTE (the statement's events), the others are parameters (with their ``rows.save_preps``);
    those in ``merged`` (JSON objects) are merged with the row's value (``||``: the parameter holds only the
    keys that changed); ``guarded``: only if the ``guard`` CTE found the run."""
    fields = tuple(Run._meta.get_field(name) for name in changed if name not in from_last)
    table = _quote(Run._meta.db_table)
    assignments = [f"{_quote(f.column)} = {table}.{_quote(f.column)} || %s::jsonb" if f.name in merged
                   else f"{_quote(f.column)} = %s" for f in fields]
    assignments += [f"{_quote(Run._meta.get_field(name).column)} = {_LAST_EVENT}.{_quote(_RUN_FROM_LAST_EVENT[name])}"
                    for name in from_last]
    source = ""
    if from_last:
        columns = ", ".join(_quote(_RUN_FROM_LAST_EVENT[name]) for name in from_last)
        source = f" FROM (SELECT {columns} FROM inserted ORDER BY {_quote('seq')} DESC LIMIT 1) {_LAST_EVENT}"
    where = f"{table}.{_quote('id')} = %s" + (" AND EXISTS (SELECT 1 FROM guard)" if guarded else "")
    return f"UPDATE {table} SET {', '.join(assignments)}{source} WHERE {where}", rows.save_preps(fields)


def _returning_for(from_last: tuple[str, ...]) -> tuple[str, ...]:
    """What the events' INSERT returns: the ids, and for ``from_last`` the seq and the columns it copies."""
    if not from_last:
        return ("id",)
    return tuple(dict.fromkeys(("id", "seq", *(_RUN_FROM_LAST_EVENT[name] for name in from_last))))


def _run_update_statement(run: Run, changed: list[str], db, from_last: tuple[str, ...] = (),
                          guarded: bool = False, merges: dict | None = None) -> tuple[str, list]:
    """``merges``: for a JSON column, the keys that changed (``json_merge``), sent in place of its value."""
    sql, preps = _run_update_sql(tuple(changed), db.vendor, from_last, guarded, tuple(merges or ()))
    values = rows.save_values(preps, [_Merged(run, merges) if merges else run], db)
    return sql, [*values, Run._meta.pk.get_db_prep_value(run.pk, db)]


class _Merged:
    """The run's attributes, with the changed part in place of a merged JSON column's value."""

    __slots__ = ("_run", "_merges")

    def __init__(self, run: Run, merges: dict):
        self._run, self._merges = run, merges

    def __getattr__(self, name):
        merges = self._merges
        return merges[name] if name in merges else getattr(self._run, name)


def json_merge(before, after) -> dict | None:
    """The top-level keys of the JSON object ``after`` that are new or changed since ``before``: what
    ``before || merge`` needs to give ``after``; None if that cannot give it (a key went away, not objects)."""
    if type(before) is not dict or type(after) is not dict or not before.keys() <= after.keys():
        return None
    return {key: value for key, value in after.items()
            if key not in before or (before[key] is not value and before[key] != value)}


_GUARD = ("{name} AS (SELECT r.id FROM {runs} r WHERE r.id = %s AND r.xmin = %s::xid AND EXISTS "
          "(SELECT 1 FROM {workflows} w WHERE w.id = %s AND w.xmin = %s::xid){token} FOR UPDATE OF r)")
# The cached API token's group names, still those it was cached with (as sets), and not revoked.
_GUARD_TOKEN = " AND EXISTS (SELECT 1 FROM (SELECT {groups} AS names) t WHERE t.names::text[] @> %s::text[] AND t.names::text[] <@ %s::text[])"


@functools.cache
def _guard_sql(vendor: str, token: bool, name: str = "guard") -> str:
    return _GUARD.format(name=name, runs=_quote(Run._meta.db_table), workflows=_quote(Workflow._meta.db_table),
                         token=_GUARD_TOKEN.format(groups=token_sql.token_groups_column()) if token else "")


def events_and_run_write(events: list[LedgerEvent], run: Run, changed: list[str], *,
                         checkpoints: list[Checkpoint] = (), commit: bool = False,
                         guard: RunRow | None = None, token=None, effect_moves=(),
                         merges: dict | None = None) -> tuple | None | bool:
    """Insert the events (and server checkpoints) and UPDATE only the run's changed columns, so a plain
    append stays a HOT update. On PostgreSQL all of it is one statement (data-modifying CTEs): one
    round trip per append besides the locking read. ``commit``: nothing follows in the transaction, so
    the statement may carry its COMMIT (``write_transaction``). Returns the run row as written (its
    version and its columns as a locking read returns them, ``stage_states`` left NULL: the caller has
    it) when the statement committed, else None.

    ``guard``: the run was not locked and read, but taken from ``RunSnapshots``; the statement locks the
    run and writes only if neither its row nor its workflow's changed since (their versions), and
    returns False when they did (nothing written). ``token``: a cached API token still to be confirmed
    (``token_sql.TokenConfirmation``): the guard also requires it unrevoked with the same roles, and a
    write confirms it. ``effect_moves`` (with a guard; at most one): an ``EffectMove``, made by the same
    statement after the run's guard and required to move a row: if it finds none, nothing is written (False).
    ``merges``: JSON columns among ``changed`` sent as their changed keys only (``json_merge``), merged with
    the row's value by the statement: the run was locked or guarded, so the row holds the value they
    changed (a run's ``stage_states`` grows to kilobytes; a stage's pass changes one entry)."""
    db = _db()
    if events and changed:
        last = events[-1]
        from_last = tuple(name for name in changed if name in _RUN_FROM_LAST_EVENT
                          and getattr(run, name) == getattr(last, _RUN_FROM_LAST_EVENT[name]))
        guarded = guard is not None
        ctes, params = [], []
        if guarded:
            ctes.append(_guard_sql(db.vendor, token is not None, "run_guard" if effect_moves else "guard"))
            params += [Run._meta.pk.get_db_prep_value(run.pk, db), guard.version, run.workflow_id,
                       guard.workflow.version]
            if token is not None:
                names = sorted(token.group_names)
                params += [token.key_hash, names, names]
            if effect_moves:  # the run's guard, then the move, then the rest only if it moved a row
                if len(effect_moves) > 1:
                    raise Speculative()  # (one move's failure would not undo another's): the locking path
                move_sql, move_params = _effect_move_statement(effect_moves[0], db)
                ctes += [f"moved AS ({move_sql} AND EXISTS (SELECT 1 FROM run_guard) RETURNING 1)",
                         "guard AS (SELECT id FROM run_guard WHERE EXISTS (SELECT 1 FROM moved))"]
                params += move_params
        elif effect_moves:
            raise ValueError("Effect moves go with a guarded write.")
        insert_sql, insert_params = insert_statement(LedgerEvent, events, db=db, returning=_returning_for(from_last),
                                                     guarded=guarded)
        ctes.append(f"inserted AS ({insert_sql})")
        params += insert_params
        if checkpoints:
            checkpoint_sql, checkpoint_params = insert_statement(Checkpoint, list(checkpoints), db=db,
                                                                 guarded=guarded)
            ctes.append(f"checkpoints AS ({checkpoint_sql})")
            params += checkpoint_params
        update_sql, update_params = _run_update_statement(run, changed, db, from_last, guarded, merges)
        returning = "(SELECT array_agg(id) FROM inserted)" + (
            ", (SELECT array_agg(id) FROM checkpoints)" if checkpoints else "")
        returning += ", " + _run_row_returning(db.vendor)
        with _cursor(db=db) as cursor:
            _execute(cursor, f"WITH {', '.join(ctes)} {update_sql} RETURNING {returning}", [*params, *update_params],
                     commit=commit, db=db)
            ids = cursor.fetchone()
        if ids is None:  # the guard found the run, its workflow or the token changed
            return False
        if token is not None:
            token.confirmed = True
        _assign_ids(events, ids[0])
        if checkpoints:
            _assign_ids(list(checkpoints), ids[1])
        if db.connection.pgconn.transaction_status != _IDLE:
            return None
        count = len(_run_read_statement(db.vendor, True, False)[1])
        return ids[-count - 1], tuple(ids[-count:])
    if guard is not None:
        raise ValueError("A guarded write needs events and changed columns.")
    rows_insert(LedgerEvent, events)
    rows_insert(Checkpoint, list(checkpoints))
    if changed:
        sql, params = _run_update_statement(run, changed, db, merges=merges)
        with _cursor(db=db) as cursor:
            _execute(cursor, sql, params, db=db)
    return None


@dataclass(frozen=True)
class EffectMove:
    """``Effect.objects.filter(**where, status__in=sources).update(**changes)``, for a snapshot's write to
    make in its statement (``events_and_run_write``)."""

    where: dict
    sources: frozenset
    changes: dict


def _effect_move_statement(move: EffectMove, db) -> tuple[str, list]:
    sql, set_fields, where_fields = _effect_move_sql(tuple(move.changes), tuple(move.where), len(move.sources))
    return sql, [*(f.get_db_prep_save(value, db) for f, value in zip(set_fields, move.changes.values())),
                 *(f.get_db_prep_value(value, db) for f, value in zip(where_fields, move.where.values())),
                 *sorted(move.sources)]


@functools.cache
def _effect_move_sql(set_names: tuple, where_names: tuple, sources: int) -> tuple[str, tuple, tuple]:
    """The UPDATE of ``EffectMove`` (the ORM's update compiled for each call cost ~0.4 ms; this is built once)."""
    set_fields = tuple(Effect._meta.get_field(name) for name in set_names)
    where_fields = tuple(Effect._meta.get_field(name) for name in where_names)
    status = _quote(Effect._meta.get_field("status").column)
    sql = (f"UPDATE {_quote(Effect._meta.db_table)} SET {', '.join(f'{_quote(f.column)} = %s' for f in set_fields)} "
           f"WHERE {' AND '.join(f'{_quote(f.column)} = %s' for f in where_fields)} "
           f"AND {status} IN ({', '.join(['%s'] * sources)})")
    return sql, set_fields, where_fields


def token_pending():
    """The cached API token the request still owes a confirmation (``ledger.auth``), or None. The
    request's first read confirms it in the same round trip (``run_lock_read``, ``reads``)."""
    if not available():
        return None
    pending = token_sql.token_to_confirm.get()
    return pending if pending is not None and not pending.confirmed else None


def checkpoint_insert_if_running(checkpoint: Checkpoint, *, ttl_seconds: int | None, terminal_states) -> bool:
    """One statement (PostgreSQL): lock the run row unless it is finished, then insert the checkpoint
    with ``created_at`` (and, with ``ttl_seconds``, ``expires_at``) from the clock read after the lock.
    Sets the checkpoint's id and times; False when the run is finished."""
    fields = [f for f in Checkpoint._meta.concrete_fields if not f.primary_key]
    values, params = [], []
    for f in fields:
        if f.name == "created_at":
            values.append("clock_timestamp()")
        elif f.name == "expires_at" and ttl_seconds is not None:
            values.append("clock_timestamp() + make_interval(secs => %s)")
            params.append(ttl_seconds)
        else:
            values.append("%s")
            params.append(f.get_db_prep_save(getattr(checkpoint, f.attname), connection))
    sql = (f"WITH running AS (SELECT id FROM {_quote(Run._meta.db_table)} WHERE id = %s "
           f"AND NOT (state = ANY(%s)) FOR UPDATE) "
           f"INSERT INTO {_quote(Checkpoint._meta.db_table)} ({', '.join(_quote(f.column) for f in fields)}) "
           f"SELECT {', '.join(values)} FROM running RETURNING id, created_at, expires_at")
    with _cursor() as cursor:
        _execute(cursor, sql, [Run._meta.pk.get_db_prep_value(checkpoint.run_id, connection), list(terminal_states),
                             *params])
        row = cursor.fetchone()
    if row is None:
        return False
    checkpoint.id, checkpoint.created_at, checkpoint.expires_at = row
    checkpoint._state.adding = False
    return True


def decision_latency_write(run_id, milliseconds: float) -> None:
    """Record a committed trigger's latency in its own transaction, committed without waiting for the
    WAL flush (``synchronous_commit`` off for this statement's transaction only): a metric that a crash
    may lose, never a ledger fact, so a trigger's answer does not wait for a second disk flush."""
    with _cursor() as cursor:
        _execute(cursor, f"WITH relaxed AS (SELECT set_config('synchronous_commit', 'off', true)) "
                         f"UPDATE {_quote(Run._meta.db_table)} SET decision_latency_ms = %s FROM relaxed "
                         f"WHERE id = %s", [milliseconds, Run._meta.pk.get_db_prep_value(run_id, connection)])


# The run's reads (``ledger.sql_runs``) and the reads sent together in one message (``ledger.sql_reads``),
# named here as every caller knows them.
from ledger.sql_runs import (RunRow, WorkflowRow, _run_read_statement, _run_row_returning,  # noqa: E402
                             _run_with_workflow, run_by_trigger_key, run_lock_read, stage_states_copy)
from ledger.sql_reads import (IntentLock, Rows, _Query, intent_advisory_lock, reads, select_models,  # noqa: E402
                              select_rows, statements_in)
from ledger import token_sql  # noqa: E402  (it builds on the statements above)
