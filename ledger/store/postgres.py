"""The store on PostgreSQL: the ORM, plus the intent's advisory lock and a claim without a savepoint."""

from __future__ import annotations

from django.db import connection

from ledger.models import Effect
from ledger.store.orm import OrmStore


class PostgresStore(OrmStore):
    vendor = "postgresql"

    def intent_lock(self, workflow_id: int, intent: str) -> None:
        """A transaction-level advisory lock on 64 bits of ``hashtextextended(intent, workflow id)``:
        two intents sharing a hash only wait for each other; nothing is ever let through."""
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, %s))", [intent, workflow_id])

    def effect_insert(self, effect: Effect) -> bool:
        """``INSERT … ON CONFLICT DO NOTHING``: one statement, no savepoint."""
        fields = [f for f in Effect._meta.concrete_fields if not f.primary_key]
        table = connection.ops.quote_name(Effect._meta.db_table)
        columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
        values = [f.get_db_prep_save(getattr(effect, f.attname), connection) for f in fields]
        with connection.cursor() as cursor:
            cursor.execute(f"INSERT INTO {table} ({columns}) VALUES ({', '.join(['%s'] * len(fields))}) "
                           f"ON CONFLICT DO NOTHING RETURNING id", values)
            row = cursor.fetchone()
        if row is None:
            return False
        effect.id, effect._state.adding = row[0], False
        return True
