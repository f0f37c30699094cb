"""The rate limiter behind the policy pipeline (``stateboard.policy.throttle_check``): ``API_RATE_LIMITS``,
who a request is counted as (the caller, its client address, or a policy's ``rate_keys``), and the
counting in the default cache (Redis when ``REDIS_URL`` is set, else per process). A cache that cannot
count lets requests through, logs it once per outage and says so in ``/healthz``."""

from __future__ import annotations

import functools
import hashlib
import logging
import time
from typing import NamedTuple

from django.conf import settings
from django.core.cache import cache
from rest_framework.throttling import SimpleRateThrottle

from stateboard.roles import is_agent

log = logging.getLogger(__name__)


def rate_limits() -> dict[str, str]:
    """``API_RATE_LIMITS`` as {class: "N/period"} (``agent=600/minute,human=120/minute``); {} = no limit."""
    return _parsed_limits(getattr(settings, "API_RATE_LIMITS", "") or "")


@functools.lru_cache(maxsize=8)
def _parsed_limits(text: str) -> dict[str, str]:
    limits = {}
    for part in text.split(","):
        name, _, rate = part.strip().partition("=")
        if name and rate:
            limits[name.strip()] = rate.strip()
    return limits


def client_address(request) -> str:
    """The caller's address: the socket's (``REMOTE_ADDR``), unless ``NUM_PROXIES`` trusted proxies stand in
    front: then the N-th entry from the right of ``X-Forwarded-For``, the one the outermost trusted proxy
    wrote (what a client sends there itself stays left of it, never read)."""
    proxies = int(getattr(settings, "NUM_PROXIES", 0) or 0)
    forwarded = request.META.get("HTTP_X_FORWARDED_FOR")
    if proxies <= 0 or not forwarded:
        return request.META.get("REMOTE_ADDR") or ""
    hops = forwarded.split(",")
    return hops[-min(proxies, len(hops))].strip()[:100]


# Rate classes that fall back to another's rate when API_RATE_LIMITS does not name them.
RATE_FALLBACK = {"login": "anon"}


class PolicyThrottle(SimpleRateThrottle):
    """Counts a request against its class's rate, per identity (anonymous: per client address; or per
    the policy's ``rate_keys``), in the default cache (Redis when ``REDIS_URL`` is set, else per process)."""

    cache = cache

    def __init__(self, rate_class: str, rate: str, key: str | None = None):
        self.scope, self.rate, self.key = rate_class, rate, key
        self.num_requests, self.duration = self.parse_rate(rate)

    def get_ident(self, request):
        return client_address(request)

    def key_of(self, request) -> str:
        return self.get_cache_key(request, None)

    def get_cache_key(self, request, view):
        if self.key is not None:  # a key the request chose (a user name): hashed, any length or character
            return f"stateboard:throttle:{self.scope}:{hashlib.sha256(self.key.encode()).hexdigest()[:40]}"
        user = request.user
        ident = f"user:{user.pk}" if user is not None and user.is_authenticated else f"addr:{self.get_ident(request)}"
        return f"stateboard:throttle:{self.scope}:{ident}"


def rate_class_of(policy, user) -> str | None:
    if policy.rate != "identity":
        return policy.rate
    if user is None or not user.is_authenticated:
        return "anon"
    return "agent" if is_agent(user) else "human"


THROTTLED_COUNTER = "stateboard:throttled_total"
LIMITER_RETRY_SECONDS = 5  # after the cache failed, requests pass uncounted this long before it is tried again


class Limiter:
    """Whether the rate limiter's cache can count. It fails open: when the cache cannot be reached, the
    request is let through, one warning is logged per outage, and ``/healthz`` says so."""

    down_since: float | None = None
    retry_at: float = 0.0
    error: str = ""

    @classmethod
    def available(cls) -> bool:
        return cls.down_since is None or time.monotonic() >= cls.retry_at

    @classmethod
    def failed(cls, exc: Exception) -> None:
        now = time.monotonic()
        cls.error, cls.retry_at = f"{type(exc).__name__}: {exc}"[:200], now + LIMITER_RETRY_SECONDS
        if cls.down_since is None:
            cls.down_since = now
            log.warning("Rate limits are not enforced: their cache cannot be reached (%s); requests pass "
                        "uncounted until it answers.", cls.error)

    @classmethod
    def answered(cls) -> None:
        if cls.down_since is not None:
            log.warning("Rate limits are enforced again: their cache answers (it was unreachable for %.0f s).",
                        time.monotonic() - cls.down_since)
            cls.down_since, cls.error = None, ""


def limiter_status() -> str:
    """"ok", or why requests are let through uncounted (for ``/healthz``); the cache is asked."""
    try:
        cache.get(THROTTLED_COUNTER)
    except Exception as exc:  # any cache client error means it cannot count
        Limiter.failed(exc)
        return f"unavailable, requests pass uncounted: {Limiter.error}"
    Limiter.answered()
    return "ok"


class OverRate(NamedTuple):
    key: str | None  # the policy's rate key that is over (None: the caller's identity)
    wait: float | None  # seconds until a request would pass
    locked_now: bool  # this refusal is the key's first in its window: a lockout starts


def over_rate(policy, request) -> OverRate | None:
    """Count the request against its class's rate under each of its keys (``policy.rate_keys``, else the
    caller's identity); the first key over the rate, else None. A cache that cannot count lets the
    request through (``Limiter``)."""
    rate_class = rate_class_of(policy, request.user)
    limits = rate_limits()
    rate = (limits.get(rate_class) or limits.get(RATE_FALLBACK.get(rate_class, ""))) if rate_class else None
    if not rate or not Limiter.available():
        return None
    keys = policy.rate_keys(request) if policy.rate_keys is not None else [None]
    try:
        refused = _first_over_rate(rate_class, rate, keys, request)
    except Exception as exc:  # the cache cannot be reached: fail open
        Limiter.failed(exc)
        return None
    Limiter.answered()
    return refused


def _first_over_rate(rate_class: str, rate: str, keys, request) -> OverRate | None:
    for key in keys:
        throttle = PolicyThrottle(rate_class, rate, key)
        if not throttle.allow_request(request, None):
            cache.add(THROTTLED_COUNTER, 0, None)  # (add and incr are atomic in Redis)
            cache.incr(THROTTLED_COUNTER)
            wait = throttle.wait()
            locked_now = key is not None and cache.add(f"{throttle.key_of(request)}:locked", 1, int(wait or 1) + 1)
            return OverRate(key, wait, bool(locked_now))
    return None


def throttled_total() -> int | None:
    """Requests answered 429 so far (in the shared cache: across processes when Redis is configured);
    None when the cache cannot be read."""
    try:
        return int(cache.get(THROTTLED_COUNTER) or 0)
    except Exception as exc:  # any cache client error: the figure is left out
        if rate_limits():
            Limiter.failed(exc)
        return None
