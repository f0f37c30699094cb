import os

from celery import Celery
from celery.signals import worker_process_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "stateboard.settings")

app = Celery("stateboard")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_process_init.connect
def _close_inherited_connections(**kwargs):
    """Prefork children must not share the parent's database connections or pool."""
    from django.db import connections  # (d) every process loads this, HTTP-only agents too

    for conn in connections.all(initialized_only=True):
        conn.close()
