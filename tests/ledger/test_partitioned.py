"""PostgreSQL's ledger is partitioned by intent (SPEC §13, migration 0021): each per-intent table is split
by hash of the intent, a run's rows live in one partition, and what spans intents — run ids, trigger
keys, effect keys — is held by the unpartitioned key tables."""

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
import pytest
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from ledger import services
from ledger.models import Approval, Checkpoint, Effect, LedgerEvent, Run, RunKey
from stateboard.errors import Conflict
from tests.factories import client_for, make_agent, make_workflow
from tests.ledger.helpers import AgentDriver

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]

PARTITIONED = ("ledger_run", "ledger_ledgerevent", "ledger_effect", "ledger_checkpoint")
ROOT = Path(__file__).resolve().parents[2]


def _rows(sql, params=()):
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def test_the_per_intent_tables_are_hash_partitioned_by_intent_and_every_unique_key_holds_it():
    found = dict(_rows("""
        SELECT c.relname, (SELECT count(*) FROM pg_inherits i WHERE i.inhparent = c.oid)
        FROM pg_partitioned_table p JOIN pg_class c ON c.oid = p.partrelid
        JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = p.partattrs[0]
        WHERE p.partstrat = 'h' AND a.attname = 'intent'"""))
    assert found == {table: 16 for table in PARTITIONED}
    unique = _rows("""
        SELECT c.relname, i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid)
        FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
        WHERE c.relname = ANY(%s) AND i.indisunique""", [list(PARTITIONED)])
    assert len(unique) >= 7
    assert [name for _, name, definition in unique if "intent" not in definition] == []


def _trigger(wf, intent, key=None):
    run, created = services.run_trigger(workflow_slug=wf.slug, intent=intent, inputs={"i": intent},
                                        trigger_key=key, actor="agent:a")
    return run, created


def test_a_runs_rows_live_in_its_intents_one_partition():
    wf = make_workflow(stages=["build", "deploy"], effect_stages=["deploy"], approval_stages=[])
    _, token = make_agent()
    driver = AgentDriver(client_for(token), wf.slug)
    partitions = {}
    for intent in ("alpha", "beta", "gamma", "delta"):
        run = driver.trigger(intent=intent)
        driver.pass_stage(run["id"], "build")
        driver.event(run["id"], "deploy", "started")
        suffixes = set()
        for table in PARTITIONED:
            for (name,) in _rows(f"SELECT DISTINCT tableoid::regclass::text FROM {table} WHERE intent = %s", [intent]):
                suffixes.add(name.rsplit("_p", 1)[1])
        assert len(suffixes) == 1, suffixes
        partitions[intent] = suffixes.pop()
        assert LedgerEvent.objects.filter(run_id=run["id"]).exclude(intent=intent).count() == 0
        assert Effect.objects.filter(run_id=run["id"], intent=intent).count() == 1
        assert Checkpoint.objects.filter(run_id=run["id"], intent=intent).exists()
    assert len(set(partitions.values())) > 1  # four intents did not all hash alike


def test_a_trigger_key_is_one_run_per_workflow_across_intents():
    wf = make_workflow()
    first, created = _trigger(wf, "alpha", key="nightly-1")
    again, created_again = _trigger(wf, "alpha", key="nightly-1")
    assert created and not created_again and again.id == first.id
    with pytest.raises(Conflict, match="another intent"):
        _trigger(wf, "beta", key="nightly-1")
    assert RunKey.objects.filter(workflow=wf, trigger_key="nightly-1").count() == 1
    now = timezone.now()
    with pytest.raises(IntegrityError, match="runkey_unique_trigger_key"), transaction.atomic():
        Run.objects.create(workflow=wf, intent="gamma", trigger_key="nightly-1", inputs={}, input_fingerprint="f",
                           policy_version="1", created_at=now, updated_at=now)  # another partition, same key
    assert Run.objects.filter(workflow=wf).count() == 1


def test_an_effect_key_is_one_effect_across_intents():
    """A stored key is unique across the install; an agent's own key is namespaced by its intent first (API.md),
    so the same key from two intents is two effects, and one intent's stored key is never another's."""
    wf = make_workflow(stages=["deploy"], effect_stages=["deploy"], approval_stages=[])
    _, token = make_agent()
    driver = AgentDriver(client_for(token), wf.slug)
    alpha, beta = driver.trigger(intent="alpha"), driver.trigger(intent="beta")
    taken = driver.event(alpha["id"], "deploy", "started", idempotency_key="deploy-prod-42")["idempotency_key"]
    own = driver.event(beta["id"], "deploy", "started", idempotency_key=taken)["idempotency_key"]
    assert own != taken and Effect.objects.filter(idempotency_key=taken).count() == 1
    assert Effect.objects.get(idempotency_key=own).intent == "beta"
    now = timezone.now()
    with pytest.raises(IntegrityError), transaction.atomic():  # past the store: the key table refuses it
        Effect.objects.create(idempotency_key=taken, workflow=wf, intent="beta", input_fingerprint="f",
                              stage="deploy", run_id=beta["id"], claimed_seq=1, last_seq=1, created_at=now,
                              updated_at=now)
        connection.check_constraints()  # the foreign keys are checked at commit (deferred, as Django's are)


def test_rows_refer_to_their_run_by_id_and_intent_and_a_runs_keys_never_change():
    wf = make_workflow()
    run, _ = _trigger(wf, "alpha")
    now = timezone.now()
    with pytest.raises(IntegrityError), transaction.atomic():  # an event of the run, filed under another intent
        LedgerEvent.objects.create(run=run, intent="beta", seq=run.event_count + 1, at=now, kind="started",
                                   actor="agent:a", input_fingerprint="f", policy_version="1", hash="0" * 64)
        connection.check_constraints()
    with pytest.raises(IntegrityError), transaction.atomic():  # an approval of no run
        Approval.objects.create(kind="high_impact", run_id=uuid.uuid4(), stage="deploy", action={},
                                action_digest="d", policy_version="1", input_fingerprint="f",
                                requested_by="agent:a", created_at=now, deadline=now)
        connection.check_constraints()
    with pytest.raises(Exception, match="never change"), transaction.atomic():
        Run.objects.filter(id=run.id).update(trigger_key="another")


def test_a_run_read_by_its_id_alone_reads_one_partition():
    from ledger.store import store

    wf = make_workflow()
    run, _ = _trigger(wf, "alpha")
    runs = store().runs_by_id(run.id)
    with connection.cursor() as cursor:
        sql, params = runs.query.sql_with_params()
        cursor.execute(f"EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) {sql}", params)
        plan = "\n".join(line for (line,) in cursor.fetchall())
    scanned = [line for line in plan.splitlines() if "ledger_run_p" in line and "never executed" not in line]
    assert len(scanned) == 1, plan
    assert [r.id for r in runs] == [run.id]


def _upgrade(url: str) -> dict:
    done = subprocess.run([sys.executable, "manage.py", "shell", "-c",
                           "import tests.ledger.partition_upgrade as upgrade; upgrade.main()"],
                          cwd=ROOT, env={**os.environ, "DATABASE_URL": url}, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads([line for line in done.stdout.splitlines() if line.startswith("{")][-1])


def _upgraded_as_expected(found: dict) -> None:
    assert len(found["events"]) == 6
    for run_intent, event_intent, event_partition, run_partition in found["events"]:
        assert event_intent == run_intent
        assert event_partition.rsplit("_p", 1)[1] == run_partition.rsplit("_p", 1)[1]
    assert found["run_keys"] == [[found["runs"][i], i, f"k-{i}"] for i in ("alpha", "beta", "gamma")]
    if found["vendor"] == "postgresql":  # an effect takes its run's intent, and its key follows
        assert found["effects"] == [["key-alpha", "alpha", "alpha"], ["key-beta", "beta", "beta"],
                                    ["key-gamma", "beta", "beta"]]
        assert found["effect_keys"] == [["key-alpha", "alpha"], ["key-beta", "beta"], ["key-gamma", "beta"]]
    else:  # SQLite keeps one table and its rows as they were
        assert found["effect_keys"] == [[f"key-{i}", i] for i in ("alpha", "beta", "gamma")]
    assert found["approvals"] == 3


@pytest.mark.slow
def test_the_migration_moves_an_existing_database(django_db_blocker):
    """A ledger written by the release before, migrated: every row in its intent's partition, events given
    their run's intent, the key tables filled, approvals pointing at the run keys."""
    settings = connection.settings_dict
    name = f"stateboard_upgrade_{os.getpid()}"
    server = {"host": settings.get("HOST") or None, "port": settings.get("PORT") or None,
              "user": settings.get("USER") or None, "password": settings.get("PASSWORD") or None}
    server = {k: str(v) for k, v in server.items() if v}
    with django_db_blocker.unblock(), psycopg.connect(dbname="postgres", autocommit=True, **server) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {name}")
        try:
            auth = settings.get("USER") or ""
            if settings.get("PASSWORD"):
                auth += f":{settings['PASSWORD']}"
            host = f"{settings.get('HOST') or ''}:{settings.get('PORT') or 5432}"
            found = _upgrade(f"postgres://{auth}{'@' if auth else ''}{host}/{name}")
        finally:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    _upgraded_as_expected(found)


@pytest.mark.slow
def test_the_migration_moves_an_existing_sqlite_database(tmp_path):
    """The embedded database keeps one table each, and gets its events' intents and both key tables."""
    _upgraded_as_expected(_upgrade(f"sqlite:///{tmp_path}/upgrade.sqlite3"))


def test_the_product_connects_without_jit():
    """JIT compiled the on-call page's plan over sixteen partitions for 7 s (it runs in 0.2 s without)."""
    assert _rows("SHOW jit") == [("off",)]


def test_the_stores_hot_statements_are_planned_once_per_connection():
    """Prepared (after ``prepare_threshold`` runs), a hot read keeps one generic plan, its partitions pruned when
    it runs: left to choose, PostgreSQL planned it anew each time (1.2 ms of planning for a 0.2 ms read)."""
    assert _rows("SHOW plan_cache_mode") == [("force_generic_plan",)]
    wf = make_workflow(stages=["build"], effect_stages=[], approval_stages=[])
    run, _ = services.run_trigger(workflow_slug=wf.slug, inputs={}, intent="planned-once", actor="agent:a")
    services.event_append(run_id=run.id, body={"stage": "build", "kind": "started"}, actor="agent:a")
    for n in range(8):
        services.event_append(run_id=run.id, body={"stage": "build", "kind": "proposed", "client_event_id": f"p{n}"},
                              actor="agent:a")
    plans = _rows("SELECT generic_plans, custom_plans FROM pg_prepared_statements "
                  """WHERE statement LIKE 'SELECT %%"ledger_run" r%%' OR statement LIKE 'WITH u AS (UPDATE%%'""")
    assert len(plans) == 2, plans  # the run as read, the write
    assert plans and all(generic >= 1 and custom == 0 for generic, custom in plans), plans


def _key_reads(call) -> int:
    with CaptureQueriesContext(connection) as captured:
        call()
    return sum("ledger_runkey" in q["sql"] for q in captured.captured_queries)


def test_a_run_scoped_write_over_http_reads_its_runs_key_once():
    """The pipeline's read of the run's key (for the workflow's ``agents``) hands the intent to the store:
    an event, a batch and a checkpoint then name it without reading the key again."""
    wf = make_workflow(stages=["build", "deploy"], effect_stages=[], approval_stages=[])
    _, token = make_agent()
    driver = AgentDriver(client_for(token), wf.slug)
    run = driver.trigger(intent="one-key-read")
    driver.event(run["id"], "build", "started")  # the token's first read warmed
    batch = [{"client_event_id": "b-1", "stage": "build", "kind": "succeeded"},
             {"client_event_id": "b-2", "stage": "deploy", "kind": "started"}]
    checkpoint = {"stage": "deploy", "state_table": {"build": {"status": "succeeded", "summary": "built"}}}

    def post(path, body):
        response = driver.client.post(f"/api/v1/runs/{run['id']}/{path}/", body, format="json")
        assert response.status_code == 201, response.content

    assert _key_reads(lambda: driver.event(run["id"], "build", "proposed", data={"proposal": "retry"})) == 1
    assert _key_reads(lambda: post("events", batch)) == 1
    assert _key_reads(lambda: post("checkpoints", checkpoint)) == 1
    assert LedgerEvent.objects.filter(run_id=run["id"], intent="one-key-read").count() >= 4
