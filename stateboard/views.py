"""Project-level views: health (the pages live in the apps)."""

import functools

import redis
from django.db import connection
from django.http import JsonResponse
from django.views.decorators.http import require_GET
from redis.backoff import NoBackoff
from redis.retry import Retry

from stateboard.celery import app
from stateboard.limits import limiter_status, rate_limits

HEALTH_DATABASE_TIMEOUT = 3  # seconds: a database that does not answer is reported, not waited for


def _database_ok() -> tuple[bool, str]:
    """``SELECT 1`` on a pooled connection taken with a short timeout (not the pool's 30 s a request may
    wait), else on the request's connection (whose connect time is bounded by ``connect_timeout``)."""
    pool = getattr(connection, "pool", None)
    try:
        if pool is not None and connection.connection is None:
            if not pool._opened:  # (as Django opens it, on first use)
                pool.open()
            with pool.connection(timeout=HEALTH_DATABASE_TIMEOUT) as conn:
                conn.execute("SELECT 1")
        else:
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
        return True, "ok"
    except Exception as exc:  # any driver error means unreachable
        return False, f"{type(exc).__name__}: {exc}"[:200]


HEALTH_CLIENT_NAME = "stateboard-healthz"


@functools.lru_cache(maxsize=4)
def _redis_client(url: str):
    """One client per broker URL in this process: its pool keeps the connection between health checks and
    replaces one Redis dropped (a restart) at the next check; a failed command is retried once, at once."""
    return redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2, retry=Retry(NoBackoff(), 1),
                                client_name=HEALTH_CLIENT_NAME)


def _broker_ok() -> tuple[bool, str]:
    """A Redis broker is PINGed on a kept connection (a new broker connection per check cost ~5 ms of CPU,
    more than an append); another broker (the embedded file system one) is connected to as Celery does."""
    url = app.conf.broker_url or ""
    try:
        if url.startswith(("redis://", "rediss://")):
            _redis_client(url).ping()
        else:
            with app.connection_for_write() as conn:
                conn.ensure_connection(max_retries=1, timeout=2)
        return True, "ok"
    except Exception as exc:
        return False, f"{type(exc).__name__}: {exc}"[:200]


@require_GET
def healthz(request):
    """Public: 200 when the database and the broker answer, else 503. With rate limits configured,
    ``rate_limiter`` says whether they are counted (a limiter that cannot count lets requests through:
    the service is degraded, not down)."""
    db_ok, db_detail = _database_ok()
    broker_ok, broker_detail = _broker_ok()
    ok = db_ok and broker_ok
    body = {"status": "ok" if ok else "unavailable", "database": db_detail, "broker": broker_detail}
    if rate_limits():
        body["rate_limiter"] = limiter_status()
    if not ok:
        body["code"] = "unhealthy"
    return JsonResponse(body, status=200 if ok else 503)
