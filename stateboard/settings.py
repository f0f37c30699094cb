"""Stateboard settings, read from the environment.

With nothing set, an embedded default runs everywhere: a SQLite file and a file-system
Celery broker under ``var/``. PostgreSQL and Redis are the production and CI setup.
"""

import json
import os
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("STATEBOARD_VAR_DIR", BASE_DIR / "var"))


def env_bool(name: str, default: bool = False) -> bool:
    return os.environ.get(name, str(default)).strip().lower() in {"1", "true", "yes", "on"}


DEBUG = env_bool("DEBUG")
# The fallback key is for the embedded demo only; `check --deploy` flags it in production.
SECRET_KEY = os.environ.get("SECRET_KEY") or "django-insecure-stateboard-embedded-demo-key"
ALLOWED_HOSTS = [h.strip() for h in os.environ.get("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]").split(",") if h.strip()]
CSRF_TRUSTED_ORIGINS = [o for o in os.environ.get("CSRF_TRUSTED_ORIGINS", "").split(",") if o]

INSTALLED_APPS = [
    "stateboard.admin_apps.StateboardAdminConfig",  # django.contrib.admin, its pages behind the policy pipeline
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI served from our static files (SPEC §6: nothing from outside)
    "django_filters",
    "django_htmx",
    "template_partials",
    "pgtrigger",
    "django_celery_beat",
    "ledger",
    "knowledge",
]

MIDDLEWARE = [
    "stateboard.errors.BodySizeLimitMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "stateboard.headers.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "stateboard.browser.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "stateboard.browser.CsrfViewMiddleware",
    "stateboard.browser.AuthenticationMiddleware",
    "stateboard.browser.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

# Flash messages live in the session the pages already use: the default (cookie first) builds a cookie
# signer on every request, API calls included (~2 % of an append's instructions, ``bench instructions``).
MESSAGE_STORAGE = "django.contrib.messages.storage.session.SessionStorage"

ROOT_URLCONF = "stateboard.urls"
WSGI_APPLICATION = "stateboard.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "stateboard.roles.roles_context",
            ],
        },
    },
]

DB_CONNECT_TIMEOUT = 5  # seconds to open a PostgreSQL connection (a host that does not answer)


def database_config(url: str, *, pool: bool = True) -> dict:
    """The database a DATABASE_URL names. PostgreSQL: no JIT, a bounded connect time, and a connection
    checked before it is handed out (so one a server restart killed is replaced, never used): from
    psycopg's pool (``pool``), else kept by each thread between requests."""
    config = dj_database_url.parse(url, conn_max_age=0)
    config["CONN_HEALTH_CHECKS"] = True
    if config["ENGINE"] != "django.db.backends.postgresql":
        config["CONN_MAX_AGE"] = int(os.environ.get("DB_CONN_MAX_AGE", "60"))
        return config
    options = config.setdefault("OPTIONS", {})
    # No JIT: on the partitioned ledger's plans it compiled for seconds what runs in milliseconds. A prepared
    # statement's generic plan (made once per connection; its partitions pruned when it runs): in auto mode
    # PostgreSQL kept planning the store's hot reads anew, 1.2 ms of planning for a 0.2 ms read.
    options["options"] = f"{options.get('options', '')} -c jit=off -c plan_cache_mode=force_generic_plan".strip()
    options.setdefault("connect_timeout", DB_CONNECT_TIMEOUT)
    # The store's hot statements bind on the server and are prepared on a connection after their fifth run
    # (ledger.store.postgres): a partitioned read then skips planning sixteen partitions each time. Django's
    # own cursors bind on the client and never prepare.
    options.setdefault("prepare_threshold", 5)
    if pool:
        # psycopg 3 pool: Django refuses persistent connections (CONN_MAX_AGE) alongside it. A connection is
        # checked at checkout by our backend, without a round trip unless it has something to read
        # (stateboard.pool), not by psycopg_pool's empty query.
        config["ENGINE"], config["CONN_HEALTH_CHECKS"] = "stateboard.postgresql", False
        options["pool"] = {"min_size": 1, "max_size": int(os.environ.get("DB_POOL_MAX", "10"))}
    else:
        config["CONN_MAX_AGE"] = int(os.environ.get("DB_CONN_MAX_AGE", "60"))
    return config


DATABASE_URL = os.environ.get("DATABASE_URL", "")
if DATABASE_URL:
    DATABASES = {"default": database_config(DATABASE_URL, pool=env_bool("DB_POOL", True))}
else:
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": VAR_DIR / "stateboard.sqlite3",
            "OPTIONS": {
                "transaction_mode": "IMMEDIATE",
                "timeout": 20,
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            },
        }
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = Path(os.environ.get("STATIC_ROOT", VAR_DIR / "staticfiles"))
try:
    STATIC_ROOT.mkdir(parents=True, exist_ok=True)
except OSError:  # a read-only deployment serves collected files from elsewhere
    pass
STATICFILES_DIRS = [BASE_DIR / "stateboard" / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "dashboard"
LOGOUT_REDIRECT_URL = "login"
# Password sign-in for people, unless OIDC_ONLY (SPEC §17): it refuses passwords, never a session it made.
AUTHENTICATION_BACKENDS = ["stateboard.signin.PasswordBackend"]

# Single sign-on with OpenID Connect (SPEC §17, docs/sso.md): environment variables only. With the issuer,
# the client id and its secret set, the sign-in page offers it; OIDC_ROLE_MAP maps the IdP's groups (the
# claim OIDC_GROUPS_CLAIM) to roles, as JSON {"<group>": "<role>"}; OIDC_ONLY=1 turns password sign-in off.
OIDC_ISSUER = os.environ.get("OIDC_ISSUER", "").strip()
OIDC_CLIENT_ID = os.environ.get("OIDC_CLIENT_ID", "").strip()
OIDC_CLIENT_SECRET = os.environ.get("OIDC_CLIENT_SECRET", "")
OIDC_GROUPS_CLAIM = os.environ.get("OIDC_GROUPS_CLAIM", "").strip() or "groups"
OIDC_ROLE_MAP = json.loads(os.environ.get("OIDC_ROLE_MAP") or "{}")
OIDC_ONLY = env_bool("OIDC_ONLY")
if OIDC_ONLY and not (OIDC_ISSUER and OIDC_CLIENT_ID and OIDC_CLIENT_SECRET):
    raise ImproperlyConfigured("OIDC_ONLY=1 needs OIDC_ISSUER, OIDC_CLIENT_ID and OIDC_CLIENT_SECRET: "
                               "nobody could sign in.")
if not isinstance(OIDC_ROLE_MAP, dict) or not all(
        isinstance(group, str) and role in ("editor", "owner", "oncall", "viewer") for group, role in OIDC_ROLE_MAP.items()):
    raise ImproperlyConfigured('OIDC_ROLE_MAP is JSON {"<group>": "<role>"}, each role one of editor, owner, '
                               'oncall, viewer.')

# Security: secure cookies and headers whenever DEBUG is off.
SESSION_COOKIE_SECURE = env_bool("SECURE_COOKIES", not DEBUG)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", False)
SECURE_HSTS_SECONDS = int(os.environ.get("SECURE_HSTS_SECONDS", "0"))
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# API
API_MAX_BODY_BYTES = int(os.environ.get("API_MAX_BODY_BYTES", str(1024 * 1024)))
API_MAX_DEPTH = 64
API_DOCS_PATH = "/api/v1/docs/"
DATA_UPLOAD_MAX_MEMORY_SIZE = API_MAX_BODY_BYTES + 1024

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "ledger.auth.HashedTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": [],  # every view is a stateboard.policy.PolicyApi: its policy is the permission
    "DEFAULT_PARSER_CLASSES": ["stateboard.errors.StrictJSONParser"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "stateboard.errors.JSONFirstNegotiation",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "stateboard.errors.api_exception_handler",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Stateboard API",
    "DESCRIPTION": (
        "The agent-facing contract of Stateboard, the control plane for scheduled and long-running AI "
        "agents. A client author starts at `POST /api/v1/runs/` (trigger) or `POST /api/v1/runs/lease/` "
        "(take a queued run), reads the run's `decision` (or `GET /api/v1/runs/{id}/resume-packet/`), then "
        "posts each stage's events to `POST /api/v1/runs/{id}/events/`; `stateboard.client` wraps all of "
        "this. Every request carries `Authorization: Token <key>` (keys come from `manage.py create_agent` "
        "and `create_operator --token`). Every error is JSON `{\"code\": \"<stable_snake_case>\", "
        "\"detail\": \"<message>\", ...}`: branch on `code`, never on `detail`; the codes each operation "
        "can answer are listed with its responses (a write-gate rejection adds `reasons`, a refused batch "
        "item its `index`)."
    ),
    "VERSION": "1.0.0",
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SERVE_AUTHENTICATION": [],
    "ENUM_NAME_OVERRIDES": {"TriggerEnum": "ledger.models.Trigger", "RunStateEnum": "ledger.models.RunState",
                            "DecisionOutcomeEnum": "ledger.api.components.DECISION_OUTCOMES",
                            "CheckpointSourceEnum": "ledger.models.Checkpoint.Source",
                            "AgentEventKindEnum": "ledger.api.components.AGENT_EVENT_KINDS"},
}

# Celery: Redis in production; a file-system broker (no server) by default.
REDIS_URL = os.environ.get("REDIS_URL", "")
# The rate limits' counters (stateboard.policy): shared in Redis when there is one, else per process.
# A Redis that does not answer costs a request at most a second: the limiter then lets requests through.
CACHES = {"default": ({"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL,
                       "KEY_PREFIX": os.environ.get("CACHE_KEY_PREFIX", "stateboard"),
                       "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1}}
                      if REDIS_URL else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"})}
# Requests per identity class: "agent=600/minute,human=120/minute,anon=60/minute" (unset: no limit);
# sign-in attempts per user name and per address: "login=10/minute" (unnamed: anon's rate).
API_RATE_LIMITS = os.environ.get("API_RATE_LIMITS", "")
# Trusted proxies in front of the app: the client address is read from X-Forwarded-For only past them
# (0: the socket's address; a client's own X-Forwarded-For is never believed).
NUM_PROXIES = int(os.environ.get("NUM_PROXIES", "0"))
REST_FRAMEWORK["NUM_PROXIES"] = NUM_PROXIES
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL") or REDIS_URL or "filesystem://"
if CELERY_BROKER_URL == "filesystem://":
    _broker_dir = VAR_DIR / "broker"
    _broker_dir.mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir),
        "data_folder_out": str(_broker_dir),
        "processed_folder": str(_broker_dir),
        "control_folder": str(_broker_dir / "control"),
        "store_processed": False,
    }
else:
    # An unacknowledged message (its worker was killed) is redelivered after this long; every task
    # time limit, and every executor attempt's deadline, is below it.
    CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 300, "socket_connect_timeout": 2, "socket_timeout": 5}
CELERY_BROKER_CONNECTION_TIMEOUT = 2
CELERY_TASK_ACKS_LATE = True  # a task is acknowledged when it finishes, so a crash redelivers it
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_TASK_SOFT_TIME_LIMIT = 200
CELERY_TASK_TIME_LIMIT = 240
CELERY_TASK_DEFAULT_QUEUE = os.environ.get("CELERY_QUEUE", "celery")
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_TIMEZONE = "UTC"
CELERY_BEAT_SCHEDULER = "ledger.schedules.beat:TickScheduler"

# Executor handlers (SPEC §5.2): name → dotted path of a ledger.executor.Handler.
STATEBOARD_EXECUTORS = {
    "webhook": "ledger.executor.webhook.WebhookHandler",
    "record": "ledger.executor.record.RecordHandler",
}
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)

# E-mail for notifications (SPEC §5.3): sent only when EMAIL_HOST or EMAIL_BACKEND is set
# (`up` uses the console backend for the demo); notifications are rows whether or not it is.
EMAIL_HOST = os.environ.get("EMAIL_HOST", "localhost")
EMAIL_PORT = int(os.environ.get("EMAIL_PORT", "25"))
EMAIL_HOST_USER = os.environ.get("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS")
EMAIL_BACKEND = os.environ.get("EMAIL_BACKEND") or "django.core.mail.backends.smtp.EmailBackend"
EMAIL_FILE_PATH = os.environ.get("EMAIL_FILE_PATH") or None  # the file backend's folder (API.md, settled points)
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "stateboard@localhost")
NOTIFICATIONS_EMAIL = bool(os.environ.get("EMAIL_HOST") or os.environ.get("EMAIL_BACKEND"))

# Chat (SPEC §12.3): pending approvals, escalations and stale claims also go to a Slack-compatible incoming
# webhook (from the outbox); with a signing secret, their buttons call back /integrations/slack/actions/.
STATEBOARD_CHAT_WEBHOOK_URL = os.environ.get("STATEBOARD_CHAT_WEBHOOK_URL", "")
STATEBOARD_SLACK_SIGNING_SECRET = os.environ.get("STATEBOARD_SLACK_SIGNING_SECRET", "")
# Where people reach the pages: links in chat messages are built on it.
STATEBOARD_PUBLIC_URL = os.environ.get("STATEBOARD_PUBLIC_URL", "http://127.0.0.1:8000")
# Alerts (SPEC §14): the `webhook` channel (signed with the secret) and the `pagerduty` channel (Events API v2).
# Traces (SPEC §16): the run page links its trace in the operators' tracing UI, e.g.
# http://127.0.0.1:16686/trace/{trace_id} for Jaeger ({trace_id}: 32 hex digits).
STATEBOARD_TRACE_URL = os.environ.get("STATEBOARD_TRACE_URL", "")
STATEBOARD_ALERT_WEBHOOK_URL = os.environ.get("STATEBOARD_ALERT_WEBHOOK_URL", "")
STATEBOARD_ALERT_WEBHOOK_SECRET = os.environ.get("STATEBOARD_ALERT_WEBHOOK_SECRET", "")
STATEBOARD_PAGERDUTY_URL = os.environ.get("STATEBOARD_PAGERDUTY_URL", "https://events.pagerduty.com/v2/enqueue")
STATEBOARD_PAGERDUTY_ROUTING_KEY = os.environ.get("STATEBOARD_PAGERDUTY_ROUTING_KEY", "")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "INFO"}},
}
