"""Real Celery worker subprocesses against the tests' Redis (``REDIS_URL``, tests/settings.py) and this test
process's database."""

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

ROOT = Path(__file__).resolve().parents[2]
BROKER = settings.REDIS_URL  # the workers listen where this process publishes


class Workers:
    """Starts workers on a queue of its own (so parallel test runs on one Redis never share messages)."""

    def __init__(self):
        self.queue = f"test-{uuid.uuid4().hex[:10]}"
        self.procs: list[subprocess.Popen] = []

    def start(self) -> subprocess.Popen:
        db = connection.settings_dict
        env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
        env.update(DJANGO_SETTINGS_MODULE="stateboard.settings", DB_POOL="0", CELERY_BROKER_URL=BROKER,
                   CELERY_QUEUE=self.queue, DATABASE_URL=f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}")
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "stateboard", "worker", "--pool", "solo", "-Q", self.queue,
             "--without-heartbeat", "--without-mingle", "--without-gossip", "--loglevel", "WARNING"],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        self.procs.append(proc)
        return proc

    def kill(self, proc) -> None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    self.kill(proc)
        import redis

        client = redis.Redis.from_url(BROKER)
        client.delete(self.queue)


def wait_until(predicate, timeout: float = 30.0, step: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return False


@pytest.fixture
def workers(monkeypatch):
    """Tasks go to a real broker (not eagerly) on a queue only this test's workers read."""
    from stateboard.celery import app

    pool = Workers()
    monkeypatch.setitem(app.conf, "task_always_eager", False)
    monkeypatch.setitem(app.conf, "broker_url", BROKER)
    monkeypatch.setitem(app.conf, "task_default_queue", pool.queue)
    yield pool
    pool.stop()
