"""Outages of the servers the product leans on, against servers the test starts and kills itself (never
the shared ones): a Redis outage never becomes a 500 (issue 39, item 5)."""

import logging

import pytest
from django.test import override_settings

from stateboard import limits
from tests.factories import client_for, login, make_agent
from tests.stateboard.outage_servers import OwnRedis

pytestmark = [pytest.mark.django_db, pytest.mark.slow]

LIMITS = "agent=100/minute,human=100/minute,anon=100/minute"


@pytest.fixture
def own_redis():
    server = OwnRedis()
    server.start()
    yield server
    server.stop()
    limits.Limiter.down_since, limits.Limiter.retry_at, limits.Limiter.error = None, 0.0, ""


def _cache_at(url: str) -> dict:
    return {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": url,
                        "KEY_PREFIX": "outage", "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1}}}


def test_a_redis_outage_lets_requests_through_and_says_so(own_redis, caplog):
    """With API_RATE_LIMITS set and the limiter's Redis killed: API calls and pages still answer, the
    limiter says in /healthz and in one log line that it does not count, /metrics reports what it can;
    when Redis is back the limits count again."""
    _, token = make_agent()
    agent = client_for(token)
    person, _ = login("viewer")
    with override_settings(CACHES=_cache_at(own_redis.url), API_RATE_LIMITS=LIMITS):
        assert agent.get("/api/v1/runs/").status_code == 200
        assert client_for(None).get("/healthz").json()["rate_limiter"] == "ok"
        own_redis.stop()
        with caplog.at_level(logging.WARNING, logger="stateboard.limits"):
            assert agent.get("/api/v1/runs/").status_code == 200
            assert person.get("/").status_code == 200
            assert agent.get("/api/v1/runs/").status_code == 200
        warnings = [r for r in caplog.records if r.name == "stateboard.limits"]
        assert len(warnings) == 1 and "not enforced" in warnings[0].getMessage()  # one line per outage
        health = client_for(None).get("/healthz")
        assert health.status_code == 200 and health.json()["rate_limiter"].startswith("unavailable")
        metrics = client_for(None).get("/metrics")
        assert metrics.status_code == 200
        text = metrics.content.decode()
        assert "stateboard_rate_limiter_up 0" in text and "stateboard_open_approvals" in text
        assert "stateboard_throttled_total" not in text  # not readable: left out, never a made-up 0
        own_redis.start()
        limits.Limiter.retry_at = 0.0  # (the limiter retries its cache after LIMITER_RETRY_SECONDS; not waited here)
        assert client_for(None).get("/healthz").json()["rate_limiter"] == "ok"
        assert "stateboard_rate_limiter_up 1" in client_for(None).get("/metrics").content.decode()


def test_metrics_answer_during_a_redis_outage_without_rate_limits(own_redis):
    with override_settings(CACHES=_cache_at(own_redis.url), API_RATE_LIMITS=""):
        own_redis.stop()
        metrics = client_for(None).get("/metrics")
        assert metrics.status_code == 200 and "stateboard_open_approvals" in metrics.content.decode()
        assert "rate_limiter" not in client_for(None).get("/healthz").json()
