"""The ledger's hot writes and reads behind one interface, one implementation per database.

``store()`` is chosen once, from the default connection's vendor: ``postgres.PostgresStore`` on
PostgreSQL (the product database), ``orm.OrmStore`` on SQLite (the embedded default of ``up``).
Nothing else in the product asks which database it runs on.
"""

from __future__ import annotations

import contextlib
import functools

from django.db import connection, transaction

from ledger.store.orm import OrmStore


@functools.cache
def store() -> OrmStore:
    if connection.vendor == "postgresql":
        from ledger.store.postgres import PostgresStore  # psycopg is imported only where it is used

        return PostgresStore()
    return OrmStore()


class StatementRefused(Exception):
    """A statement was about to be sent where none may be (``statements_refused``)."""


@contextlib.contextmanager
def statements_refused():
    """Inside: any statement on the default connection raises ``StatementRefused`` before it is sent. Code
    that may work from rows already read runs under it to learn that it needed nothing more."""
    def refuse(execute, sql, params, many, context):
        raise StatementRefused(sql)

    needs_rollback = connection.needs_rollback
    try:
        with connection.execute_wrapper(refuse):
            yield
    except StatementRefused:  # nothing was sent: a caller's transaction is as sound as before
        if connection.in_atomic_block:
            transaction.set_rollback(needs_rollback)
        raise
