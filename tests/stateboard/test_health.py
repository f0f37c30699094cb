"""/healthz and /metrics, outside the API prefix."""

import os

import pytest

pytestmark = pytest.mark.django_db


def test_healthz_reports_database_and_broker(client):
    """Public, against the real PostgreSQL and Redis."""
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "database": "ok", "broker": "ok"}


def test_healthz_is_503_when_the_broker_is_unreachable(client):
    from stateboard.celery import app

    original = app.conf.broker_url
    app.conf.broker_url = "redis://127.0.0.1:1/0"
    try:
        response = client.get("/healthz")
    finally:
        app.conf.broker_url = original
    assert response.status_code == 503
    assert response.json()["code"] == "unhealthy" and response.json()["database"] == "ok"


@pytest.fixture
def own_health_client_name(monkeypatch):
    """The health check's Redis client, named for this test alone: CLIENT LIST filtered by it sees only the
    connections this test process made, whoever else (another test run, a server) shares the Redis server."""
    import uuid

    from stateboard import views

    name = f"{views.HEALTH_CLIENT_NAME}-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    views._redis_client.cache_clear()  # a client made before this test carries the shared name
    monkeypatch.setattr(views, "HEALTH_CLIENT_NAME", name)
    yield name
    from stateboard.celery import app

    if views._redis_client.cache_info().currsize:
        views._redis_client(app.conf.broker_url).close()  # this test's connection, not left open
    views._redis_client.cache_clear()  # the next check makes a client with the product's name again


def test_healthz_pings_the_broker_on_a_kept_connection_and_replaces_one_redis_dropped(client, settings,
                                                                                       own_health_client_name):
    import redis

    admin = redis.Redis.from_url(settings.CELERY_BROKER_URL)

    def health_connections() -> list[int]:
        return [c["id"] for c in admin.client_list() if c.get("name") == own_health_client_name]

    assert health_connections() == []
    assert client.get("/healthz").status_code == 200
    kept = health_connections()
    assert client.get("/healthz").status_code == 200
    assert len(kept) == 1 and health_connections() == kept  # the same connection, not a new one per check
    admin.client_kill_filter(_id=kept[0])  # as a Redis restart drops it
    response = client.get("/healthz")
    assert response.status_code == 200 and response.json()["broker"] == "ok"
    assert len(health_connections()) == 1 and health_connections() != kept
    admin.close()


def test_prometheus_metrics_are_text(client):
    response = client.get("/metrics")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/plain")
    assert "stateboard_open_approvals" in response.content.decode()


def test_openapi_schema_and_docs_are_public(client):
    schema = client.get("/api/v1/schema/")
    assert schema.status_code == 200 and b"/api/v1/runs/{run_id}/events/" in schema.content
    assert client.get("/api/v1/docs/").status_code == 200
