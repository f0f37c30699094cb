"""Test settings: the real PostgreSQL and Redis on this machine unless told otherwise."""

import os

os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/15")
os.environ.setdefault("DB_POOL", "0")

from stateboard.settings import *  # noqa: E402,F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
CELERY_TASK_ALWAYS_EAGER = True
SESSION_COOKIE_SECURE = False
CSRF_COOKIE_SECURE = False

# One test database per pytest process, so parallel runs on one machine never clobber each other.
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):  # noqa: F405  the embedded default: in memory, per process
    DATABASES["default"]["OPTIONS"] = {"transaction_mode": "IMMEDIATE", "timeout": 20}  # noqa: F405
else:
    DATABASES["default"]["TEST"] = {"NAME": f"test_stateboard_{os.getpid()}"}  # noqa: F405

# The cache (rate limits' counters) is the shared Redis db: this process's keys are its own.
CACHES["default"]["KEY_PREFIX"] = f"test{os.getpid()}"  # noqa: F405

# Django's test Client builds the middleware for each client, and WhiteNoise would index every static file (the API
# docs' sidecar included: ~60 ms) each time; it finds them per request instead, as under `runserver`.
WHITENOISE_AUTOREFRESH = True
