import os

from celery import Celery
from celery.signals import worker_process_init
from django.db.utils import InterfaceError, OperationalError

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "stateboard.settings")

app = Celery("stateboard")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# A database outage (a restart, a failover) fails an attempt, not the task: every task that writes is
# retried, after 1, 2, 4 … 30 s (jittered; about four minutes in all). Each is idempotent (a tick by its
# slot, a run's work under its lock), so a retry is harmless; before it, the worker drops the broken
# connection (Celery's Django fixup, before each task).
DB_RETRY = {"autoretry_for": (OperationalError, InterfaceError), "retry_backoff": 1, "retry_backoff_max": 30,
            "retry_jitter": True, "max_retries": 12}


@worker_process_init.connect
def _close_inherited_connections(**kwargs):
    """Prefork children must not share the parent's database connections or pool."""
    from django.db import connections  # (d) every process loads this, HTTP-only agents too

    for conn in connections.all(initialized_only=True):
        conn.close()
