"""PostgreSQL: the per-intent ledger tables (runs, events, effects, checkpoints) become hash-partitioned
by ``intent`` (SPEC §13, docs/scaling.md). SQLite keeps one table each; on both, a trigger on the run's
insert writes its row of ``ledger_runkey``.

Each table is rebuilt as a partitioned table with the same columns, defaults and checks, its rows
copied (events take their run's intent), and its constraints, indexes and triggers recreated under
the same names, with one change PostgreSQL requires: every primary key and unique constraint also
holds ``intent``. What spans intents moves to the unpartitioned ``ledger.models.keys`` tables:

- a run is addressed by its id alone: approvals and audit entries refer to ``ledger_runkey``, which a
  trigger on the run's insert fills; its ``(workflow, trigger_key)`` is unique;
- an effect's key is unique across the install: the effect refers to ``ledger_effectkey`` by
  ``(idempotency_key, intent)``;
- rows of a run refer to it by ``(run_id, intent)``, checked against its run key (which a run's row
  always has, with the same id and intent: the trigger writes it and refuses a change of either).
"""

import sys

from django.db import migrations

from ledger.models.keys import SQLITE_RUN_KEY_TRIGGERS

TABLES = ("ledger_run", "ledger_ledgerevent", "ledger_effect", "ledger_checkpoint")
PARTITIONS = 16
# Tables outside the partitioned ones that refer to a run: they now refer to its row in ledger_runkey.
RUN_REFERRERS = ("ledger_approval", "ledger_auditentry")

RUN_KEY_FUNCTION = """
CREATE FUNCTION ledger_run_key() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO ledger_runkey (run_id, intent, workflow_id, trigger_key)
        VALUES (NEW.id, NEW.intent, NEW.workflow_id, NEW.trigger_key);
        RETURN NEW;
    ELSIF TG_OP = 'DELETE' THEN
        DELETE FROM ledger_runkey WHERE run_id = OLD.id;
        RETURN OLD;
    ELSIF (NEW.id, NEW.intent, NEW.workflow_id, NEW.trigger_key)
          IS DISTINCT FROM (OLD.id, OLD.intent, OLD.workflow_id, OLD.trigger_key) THEN
        RAISE EXCEPTION 'a run''s id, intent, workflow and trigger key never change';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER ledger_run_key_insert BEFORE INSERT ON ledger_run FOR EACH ROW EXECUTE FUNCTION ledger_run_key();
CREATE TRIGGER ledger_run_key_change BEFORE UPDATE OF id, intent, workflow_id, trigger_key ON ledger_run
    FOR EACH ROW EXECUTE FUNCTION ledger_run_key();
CREATE TRIGGER ledger_run_key_delete AFTER DELETE ON ledger_run FOR EACH ROW EXECUTE FUNCTION ledger_run_key();
"""


def _rows(cursor, sql, params=()):
    cursor.execute(sql, params)
    return cursor.fetchall()


def _with_intent(definition: str) -> str:
    """``UNIQUE (run_id, seq)`` → ``UNIQUE (run_id, intent, seq)``: the intent second, so a lookup by the
    first column and the intent (what the store sends) uses the rest of the key too."""
    head, _, rest = definition.partition("(")
    columns, _, tail = rest.partition(")")
    names = [c.strip() for c in columns.split(",")]
    if "intent" in names:
        return definition
    return f"{head}({', '.join([names[0], 'intent', *names[1:]])}){tail}"


def _partition(cursor, table: str) -> dict:
    """Build ``table`` again, partitioned; return what to recreate once the old table is gone."""
    found = {
        "constraints": _rows(cursor, "SELECT conname, contype, pg_get_constraintdef(oid) FROM pg_constraint "
                                     "WHERE conrelid = %s::regclass AND contype IN ('p', 'u', 'f')", [table]),
        "indexes": [d for (d,) in _rows(cursor, """
            SELECT pg_get_indexdef(i.indexrelid) FROM pg_index i
            WHERE i.indrelid = %s::regclass
              AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid)""", [table])],
        "triggers": _rows(cursor, "SELECT tgname, pg_get_triggerdef(oid), obj_description(oid, 'pg_trigger') "
                                  "FROM pg_trigger WHERE tgrelid = %s::regclass AND NOT tgisinternal", [table]),
    }
    new = f"{table}__partitioned"
    cursor.execute(f"CREATE TABLE {new} (LIKE {table} INCLUDING DEFAULTS INCLUDING IDENTITY "
                   f"INCLUDING CONSTRAINTS INCLUDING STORAGE) PARTITION BY HASH (intent)")
    for remainder in range(PARTITIONS):
        cursor.execute(f"CREATE TABLE {table}_p{remainder:02d} PARTITION OF {new} "
                       f"FOR VALUES WITH (MODULUS {PARTITIONS}, REMAINDER {remainder})")
    columns = [name for (name,) in _rows(cursor, "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass "
                                                 "AND attnum > 0 AND NOT attisdropped ORDER BY attnum", [table])]
    (count,) = _rows(cursor, f"SELECT count(*) FROM {table}")[0]
    if count:
        sys.stdout.write(f"\n  partitioning {table}: {count:,} rows ...\n")
        sys.stdout.flush()
    if table in ("ledger_ledgerevent", "ledger_effect"):  # their run's intent (an old re-claim could leave it behind)
        taken = {"intent": "r.intent", "workflow_id": "r.workflow_id"} if table == "ledger_effect" else {"intent": "r.intent"}
        source = ", ".join(taken.get(c, f"e.{c}") for c in columns)
        cursor.execute(f"INSERT INTO {new} ({', '.join(columns)}) SELECT {source} "
                       f"FROM {table} e JOIN ledger_run r ON r.id = e.run_id")
    else:
        cursor.execute(f"INSERT INTO {new} ({', '.join(columns)}) SELECT {', '.join(columns)} FROM {table}")
    if "id" in columns and table != "ledger_run":
        cursor.execute(f"SELECT setval(pg_get_serial_sequence(%s, 'id'), coalesce(max(id), 0) + 1, false) "
                       f"FROM {new}", [new])
    return found


def _recreate(cursor, table: str, found: dict) -> None:
    for name, kind, definition in found["constraints"]:
        if kind == "f" and "REFERENCES ledger_run(id)" in definition:  # (checked against the small key table)
            definition = definition.replace("(run_id) REFERENCES ledger_run(id)",
                                            "(run_id, intent) REFERENCES ledger_runkey(run_id, intent)")
        elif kind in ("p", "u"):
            definition = _with_intent(definition)
        cursor.execute(f"ALTER TABLE {table} ADD CONSTRAINT {name} {definition}")
    for definition in found["indexes"]:
        if definition.startswith("CREATE UNIQUE INDEX"):
            definition = _with_intent(definition)
        cursor.execute(definition)
    for name, definition, comment in found["triggers"]:
        cursor.execute(definition)
        if comment is not None:  # pgtrigger's hash of its definition
            cursor.execute(f"COMMENT ON TRIGGER {name} ON {table} IS %s", [comment])


def partition(apps, schema_editor):
    connection = schema_editor.connection
    if connection.vendor != "postgresql":  # SQLite: one table each, and the same run keys
        with connection.cursor() as cursor:
            cursor.execute("INSERT INTO ledger_runkey (run_id, intent, workflow_id, trigger_key) "
                           "SELECT id, intent, workflow_id, trigger_key FROM ledger_run")
            for statement in SQLITE_RUN_KEY_TRIGGERS:
                cursor.execute(statement)
        return
    with connection.cursor() as cursor:
        referrers = {t: _rows(cursor, "SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass "
                                      "AND contype = 'f' AND confrelid = 'ledger_run'::regclass", [t])
                     for t in RUN_REFERRERS}
        cursor.execute("INSERT INTO ledger_runkey (run_id, intent, workflow_id, trigger_key) "
                       "SELECT id, intent, workflow_id, trigger_key FROM ledger_run")
        cursor.execute("UPDATE ledger_effectkey k SET intent = r.intent FROM ledger_effect e "
                       "JOIN ledger_run r ON r.id = e.run_id "
                       "WHERE k.idempotency_key = e.idempotency_key AND k.intent <> r.intent")
        found = {table: _partition(cursor, table) for table in TABLES}
        for table in reversed(TABLES):
            cursor.execute(f"DROP TABLE {table} CASCADE")
        for table in TABLES:
            cursor.execute(f"ALTER TABLE {table}__partitioned RENAME TO {table}")
            if table != "ledger_run":
                cursor.execute(f"ALTER SEQUENCE {table}__partitioned_id_seq RENAME TO {table}_id_seq")
        for table in TABLES:
            _recreate(cursor, table, found[table])
        cursor.execute("ALTER TABLE ledger_effect ADD CONSTRAINT ledger_effect_key_fk FOREIGN KEY "
                       "(idempotency_key, intent) REFERENCES ledger_effectkey (idempotency_key, intent) "
                       "DEFERRABLE INITIALLY DEFERRED")
        for table, names in referrers.items():
            for (name,) in names:
                cursor.execute(f"ALTER TABLE {table} ADD CONSTRAINT {name} FOREIGN KEY (run_id) "
                               f"REFERENCES ledger_runkey (run_id) DEFERRABLE INITIALLY DEFERRED")
        cursor.execute(RUN_KEY_FUNCTION)
        for table in TABLES:
            cursor.execute(f"ANALYZE {table}")


class Migration(migrations.Migration):
    atomic = True

    dependencies = [
        ("ledger", "0020_partition_keys"),
    ]

    operations = [
        migrations.RunPython(partition, elidable=False),  # irreversible: back to 0020 means a restore
    ]
