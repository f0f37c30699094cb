"""How the PostgreSQL store sends its statements: bound on the server, so psycopg prepares each on its
connection once it has run there a few times (``prepare_threshold``) and PostgreSQL keeps one generic plan
for it (``plan_cache_mode``, settings); several at once in one round trip (psycopg's pipeline)."""

from __future__ import annotations

import functools
import itertools
import re
import time

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.backends.utils import CursorDebugWrapper
from psycopg import ClientCursor, RawCursor


def _connected():
    """The default connection, looked up once (each attribute read through Django's ``connection`` proxy looks
    up the thread's again), made sure of as Django's own ``cursor()`` does (a restart's dead connection)."""
    db = connections[DEFAULT_DB_ALIAS]
    db.close_if_health_check_failed()
    db.ensure_connection()
    return db


def prepared():
    """A Django cursor over a server-binding psycopg cursor: its statements are prepared per connection
    after ``prepare_threshold`` runs (settings; Django's own cursors bind on the client and never are)."""
    db = _connected()
    raw = NumberedCursor(db.connection)
    return LoggedAsWritten(raw, db) if db.queries_logged else db.make_cursor(raw)


def pipelined(statements: list[tuple[str, list]]) -> list[list]:
    """The statements in one round trip (psycopg's pipeline), each bound on the server and so prepared like
    ``prepared()``'s; each one's rows. Django's query log gets one entry, as for one statement: a round trip."""
    db = _connected()
    raw, began = db.connection, time.monotonic()
    cursors = [db.make_cursor(NumberedCursor(raw)) for _ in statements]
    try:
        with db.wrap_database_errors:
            with raw.pipeline():
                for cursor, (sql, params) in zip(cursors, statements):
                    cursor.execute(sql, params)
            results = [cursor.fetchall() for cursor in cursors]
    finally:
        for cursor in cursors:
            cursor.close()
    if db.queries_logged:  # (with the values written in, as Django logs its own cursors' statements)
        written = ClientCursor(raw)
        db.queries_log.append({"sql": "; ".join(written.mogrify(sql, params) for sql, params in statements),
                               "time": f"{time.monotonic() - began:.3f}"})
    return results


class NumberedCursor(RawCursor):
    """The store's statements, written with ``%s``, sent with PostgreSQL's own ``$n`` placeholders numbered
    once per text: psycopg parses a statement's placeholders on every call once it has more than 50
    parameters (an append's write has ~60), which cost a seventh of an append's CPU."""

    def execute(self, query, params=None, **kwargs):
        return super().execute(numbered(query), params, **kwargs)


@functools.lru_cache(maxsize=1024)  # the store's statements: a few dozen texts
def numbered(query: str) -> str:
    if "%" in query.replace("%s", ""):
        raise ValueError("The store's statements hold no % but their %s placeholders.")
    numbers = itertools.count(1)
    return re.sub("%s", lambda _: f"${next(numbers)}", query)


class LoggedAsWritten(CursorDebugWrapper):
    """Django's query log of a server-binding cursor: the statement as written (psycopg keeps no text of a
    prepared one for Django's ``last_executed_query``)."""

    def debug_sql(self, sql=None, params=None, use_last_executed_query=False, many=False):
        return super().debug_sql(sql, params, use_last_executed_query=False, many=many)
