"""A PostgreSQL restart or outage loses no schedule tick and answers no 500 (issue 39, item 6), against a
cluster this test starts, restarts and stops itself (``initdb`` + ``pg_ctl`` on a port of its own)."""

import os
import signal
import subprocess
import sys
import time
import uuid
from contextlib import contextmanager

import pytest
from django.db import close_old_connections, connections
from django.db.utils import InterfaceError, OperationalError, load_backend
from django.test import Client

from stateboard.settings import database_config
from tests.factories import client_for, make_agent, make_workflow
from tests.ledger.workers import BROKER, ROOT, wait_until
from tests.stateboard.outage_servers import OwnPostgres, _pg_bin

DB = "stateboard"


def test_every_task_retries_a_database_outage_with_backoff():
    """Every task of the apps (ticks, sweeps, the executor, the relay) retries on OperationalError and
    InterfaceError (Django's wrappers of psycopg's), with backoff, instead of failing its one attempt."""
    from stateboard.celery import app

    app.loader.import_default_modules()
    tasks = {name: task for name, task in app.tasks.items() if name.startswith(("ledger.", "knowledge."))}
    assert "ledger.tasks.workflow_fire" in tasks and len(tasks) >= 12
    for name, task in tasks.items():
        retried = getattr(task, "autoretry_for", ())
        assert OperationalError in retried and InterfaceError in retried, name
        assert task.retry_backoff and task.max_retries >= 8, name


@pytest.fixture(scope="module")
def own_postgres(django_db_setup, django_db_blocker):
    """A cluster of its own holding a copy of this test process's migrated test database."""
    source = connections["default"].settings_dict
    if not source["ENGINE"].endswith("postgresql"):
        pytest.skip("needs PostgreSQL")
    server = OwnPostgres()
    source_name = (source.get("TEST") or {}).get("NAME") or f"test_{source['NAME']}"
    try:
        server.init()
        server.start()
        dump = os.path.join(server.root, "schema.dump")
        subprocess.run([_pg_bin("pg_dump"), "-h", source["HOST"], "-p", str(source["PORT"]), "-U", source["USER"],
                        "-Fc", "-f", dump, source_name], check=True, capture_output=True, timeout=60)
        subprocess.run([_pg_bin("psql"), "-h", "127.0.0.1", "-p", str(server.port), "-U", "postgres", "-q", "-c",
                        f"CREATE DATABASE {DB}"], check=True, capture_output=True, timeout=30)
        subprocess.run([_pg_bin("pg_restore"), "-h", "127.0.0.1", "-p", str(server.port), "-U", "postgres",
                        "--no-owner", "-d", DB, dump], check=True, capture_output=True, timeout=60)
        yield server
    finally:
        server.destroy()


@contextmanager
def served_from(server: OwnPostgres, *, pool: bool):
    """This process's default connection on ``server``, configured as the product configures it (its backend
    included)."""
    saved = connections["default"]
    saved.close()
    config = {**saved.settings_dict, **database_config(server.url(DB), pool=pool), "TEST": saved.settings_dict.get("TEST", {})}
    conn = load_backend(config["ENGINE"]).DatabaseWrapper(config, "default")
    connections["default"] = conn
    try:
        yield conn
    finally:
        conn.close()
        if pool:
            conn.pool.close(timeout=1)  # (its workers may be waiting on a server the test stopped)
            conn.close_pool()
        connections["default"] = saved


def served(client, url: str):
    """A GET as a server answers it: connections are closed or checked at the request's start and end
    (the test client skips that, to keep a test's transaction)."""
    close_old_connections()
    try:
        return client.get(url)
    finally:
        close_old_connections()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)  # (no transaction around the test: its connection goes elsewhere)
@pytest.mark.parametrize("pool", [True, False], ids=["pool", "kept-connections"])
def test_after_a_restart_no_request_fails_and_during_an_outage_healthz_answers_within_5_s(
        own_postgres, django_db_blocker, pool):
    with django_db_blocker.unblock(), served_from(own_postgres, pool=pool):
        _, token = make_agent()
        api, anonymous = client_for(token), Client()
        api.raise_request_exception = anonymous.raise_request_exception = False
        assert served(api, "/api/v1/runs/").status_code == 200 and served(anonymous, "/healthz").status_code == 200
        own_postgres.restart()  # every connection open or pooled is gone
        answers = [served(api, "/api/v1/runs/").status_code for _ in range(4)]
        answers += [served(anonymous, "/healthz").status_code for _ in range(2)]
        assert answers == [200] * 6
        own_postgres.stop()
        started = time.monotonic()
        health = served(anonymous, "/healthz")
        assert health.status_code == 503 and health.json()["database"] != "ok"
        assert time.monotonic() - started < 5
        own_postgres.start()
        assert served(api, "/api/v1/runs/").status_code == 200


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_schedule_ticks_survive_a_restart_and_an_outage(own_postgres, django_db_blocker, monkeypatch):
    """Ten ticks to a real worker (the product's pool on): three before a restart, three right after it
    (its pooled connection is dead), two while the server is down, two after it is back: ten runs."""
    from stateboard.celery import app

    queue = f"test-outage-{uuid.uuid4().hex[:10]}"
    monkeypatch.setitem(app.conf, "task_always_eager", False)
    monkeypatch.setitem(app.conf, "broker_url", BROKER)
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env.update(DJANGO_SETTINGS_MODULE="stateboard.settings", DB_POOL="1", DATABASE_URL=own_postgres.url(DB),
               CELERY_BROKER_URL=BROKER, CELERY_QUEUE=queue, REDIS_URL="")
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "stateboard", "worker", "--pool", "solo", "-Q", queue,
         "--without-heartbeat", "--without-mingle", "--without-gossip", "--loglevel", "WARNING"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        with django_db_blocker.unblock(), served_from(own_postgres, pool=False):
            from ledger.models import Run

            workflow = make_workflow(schedule_intent="nightly")

            def runs() -> int:
                try:
                    return Run.objects.filter(workflow=workflow).count()
                except (OperationalError, InterfaceError):
                    connections["default"].close()
                    return -1

            def tick(i: int) -> None:
                app.send_task("ledger.tasks.workflow_fire", queue=queue,
                              kwargs={"workflow_slug": workflow.slug, "slot": f"2026-01-01T00:{i:02d}:00Z"})

            for i in range(3):
                tick(i)
            assert wait_until(lambda: runs() == 3, timeout=20), runs()
            own_postgres.restart()
            for i in range(3, 6):
                tick(i)
            time.sleep(1)
            own_postgres.stop()
            tick(6)
            tick(7)
            time.sleep(2)
            own_postgres.start()
            tick(8)
            tick(9)
            assert wait_until(lambda: runs() == 10, timeout=25), runs()
    finally:
        os.killpg(worker.pid, signal.SIGKILL)  # (its own session: the worker and any child it made)
        worker.wait(10)
        import redis

        redis.Redis.from_url(BROKER).delete(queue)
