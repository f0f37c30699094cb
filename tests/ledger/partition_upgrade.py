"""Run in a subprocess on a scratch database by test_partitioned.py: migrate to the release before the
partitioning, write a small ledger with that release's models, migrate to the latest, print what came
through as JSON."""

import json
import uuid
from datetime import timedelta

from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from stateboard.db import sqlite_guards_install

BEFORE = ("ledger", "0019_verbose_names")


def _ledger(apps) -> dict:
    Workflow, Run = apps.get_model("ledger", "Workflow"), apps.get_model("ledger", "Run")
    LedgerEvent, Effect = apps.get_model("ledger", "LedgerEvent"), apps.get_model("ledger", "Effect")
    Checkpoint, Approval = apps.get_model("ledger", "Checkpoint"), apps.get_model("ledger", "Approval")
    now = timezone.now()
    wf = Workflow.objects.create(slug="upgrade", stages=["deploy"], effect_stages=["deploy"], approval_stages=[])
    runs = {}
    for intent in ("alpha", "beta", "gamma"):
        run = Run.objects.create(id=uuid.uuid4(), workflow=wf, intent=intent, trigger_key=f"k-{intent}", inputs={},
                                 input_fingerprint="f" * 64, policy_version="1", state="completed",
                                 created_at=now, updated_at=now, event_count=2)
        for seq in (1, 2):
            LedgerEvent.objects.create(run=run, seq=seq, at=now, kind="started", actor="agent:a",
                                       input_fingerprint="f" * 64, policy_version="1", hash=f"{seq}" * 64)
        Effect.objects.create(idempotency_key=f"key-{intent}", workflow=wf, intent=intent, input_fingerprint="f" * 64,
                              stage="deploy", run=run, claimed_seq=1, last_seq=2, created_at=now, updated_at=now)
        Checkpoint.objects.create(workflow=wf, intent=intent, run=run, source="server", payload={},
                                  input_fingerprint="f" * 64, policy_version="1", created_at=now,
                                  expires_at=now + timedelta(days=1))
        Approval.objects.create(kind="high_impact", run=run, stage="deploy", action={}, action_digest="d",
                                policy_version="1", input_fingerprint="f" * 64, requested_by="agent:a",
                                created_at=now, deadline=now + timedelta(days=1))
        runs[intent] = str(run.id)
    # What an earlier release's re-claim could leave: gamma's effect moved to a run of beta, its intent behind.
    Effect.objects.filter(idempotency_key="key-gamma").update(run_id=runs["beta"])
    return runs


def main() -> None:
    executor = MigrationExecutor(connection)
    executor.migrate([BEFORE])
    sqlite_guards_install()  # what migrate's post_migrate gives an SQLite database
    runs = _ledger(executor.loader.project_state([BEFORE]).apps)
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
    partition = "{}.tableoid::regclass::text" if connection.vendor == "postgresql" else "'whole_p'"  # SQLite: one table
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT r.intent, e.intent, {partition.format('e')}, {partition.format('r')} "
                       "FROM ledger_ledgerevent e JOIN ledger_run r ON r.id = e.run_id ORDER BY r.intent, e.seq")
        events = cursor.fetchall()
        cursor.execute("SELECT run_id, intent, trigger_key FROM ledger_runkey ORDER BY intent")
        run_keys = [(str(uuid.UUID(str(run_id))), intent, key) for run_id, intent, key in cursor.fetchall()]
        cursor.execute("SELECT idempotency_key, intent FROM ledger_effectkey ORDER BY idempotency_key")
        effect_keys = cursor.fetchall()
        cursor.execute("SELECT e.idempotency_key, e.intent, r.intent FROM ledger_effect e "
                       "JOIN ledger_run r ON r.id = e.run_id ORDER BY e.idempotency_key")
        effects = cursor.fetchall()
        cursor.execute("SELECT count(*) FROM ledger_approval a JOIN ledger_runkey k ON k.run_id = a.run_id")
        (approvals,) = cursor.fetchone()
    print(json.dumps({"runs": runs, "events": events, "run_keys": run_keys, "effect_keys": effect_keys,
                      "effects": effects, "vendor": connection.vendor, "approvals": approvals}))
