"""The ledger's hot writes and reads behind one interface, one implementation per database.

``store()`` is chosen once, from the default connection's vendor: ``postgres.PostgresStore`` on
PostgreSQL (the product database), ``orm.OrmStore`` on SQLite (the embedded default of ``up``).
Nothing else in the product asks which database it runs on.
"""

from __future__ import annotations

import functools

from django.db import connection

from ledger.store.orm import OrmStore


@functools.cache
def store() -> OrmStore:
    if connection.vendor == "postgresql":
        from ledger.store.postgres import PostgresStore  # psycopg is imported only where it is used

        return PostgresStore()
    return OrmStore()
