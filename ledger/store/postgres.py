"""The store on PostgreSQL: the ORM, plus the intent's advisory lock, a claim without a savepoint and a
token read in one statement."""

from __future__ import annotations

from django.contrib.auth.models import Group
from django.contrib.postgres.expressions import ArraySubquery
from django.db import connection
from django.db.models import OuterRef

from ledger.models import ApiToken, Effect
from ledger.store.orm import OrmStore


class PostgresStore(OrmStore):
    vendor = "postgresql"

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
        names = Group.objects.filter(user=OuterRef("user_id")).values("name")
        token = (ApiToken.objects.select_related("user").annotate(group_names=ArraySubquery(names))
                 .filter(key_hash=key_hash).first())
        return (token, token.group_names) if token is not None else (None, [])

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
