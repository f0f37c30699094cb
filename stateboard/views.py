"""Project-level views: the dashboard home, health and Prometheus metrics."""

import functools

from django.db import connection
from django.http import HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET, require_POST
from stateboard.policy import ANY, Policy, page


def _database_ok() -> tuple[bool, str]:
    try:
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
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    return redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2, retry=Retry(NoBackoff(), 1),
                                client_name=HEALTH_CLIENT_NAME)


def _broker_ok() -> tuple[bool, str]:
    """A Redis broker is PINGed on a kept connection (a new broker connection per check cost ~5 ms of CPU,
    more than an append); another broker (the embedded file system one) is connected to as Celery does."""
    from stateboard.celery import app

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
    """Public: 200 when the database and the broker answer, else 503."""
    db_ok, db_detail = _database_ok()
    broker_ok, broker_detail = _broker_ok()
    ok = db_ok and broker_ok
    body = {"status": "ok" if ok else "unavailable", "database": db_detail, "broker": broker_detail}
    if not ok:
        body["code"] = "unhealthy"
    return JsonResponse(body, status=200 if ok else 503)


def _prometheus_label(value) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _prometheus_value(value) -> str:
    return repr(float(value)) if isinstance(value, float) else str(int(value))


@require_GET
def prometheus_metrics(request):
    """Public: the SPEC §7 figures in the Prometheus text format (0.0.4); figures without data left out."""
    from ledger import selectors

    lines = []
    for name, help_text, kind, samples in selectors.prometheus_samples():
        samples = [(labels, value) for labels, value in samples if value is not None]  # no data: left out
        if not samples:
            continue
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            label_text = ",".join(f'{k}="{_prometheus_label(v)}"' for k, v in labels.items())
            lines.append(f"{name}{{{label_text}}} {_prometheus_value(value)}" if label_text
                         else f"{name} {_prometheus_value(value)}")
    return HttpResponse("\n".join(lines) + "\n", content_type="text/plain; version=0.0.4; charset=utf-8")


@require_GET
@page(Policy(roles=ANY))
def dashboard(request):
    """Home: runs by state, the pending approvals, the latest runs."""
    from ledger import selectors
    from ledger.models import TERMINAL_STATES, RunState

    summary = selectors.dashboard_summary()
    counts = summary["state_counts"]
    state_counts = [{"state": s, "n": counts.get(s, 0), "terminal": s in TERMINAL_STATES} for s in RunState.values]
    context = {
        **summary,
        "poll": bool(summary["pending_approvals"]) or any(
            counts.get(s, 0) for s in RunState.values if s not in TERMINAL_STATES),
        "state_counts": state_counts,
        "total_runs": sum(counts.values()),
        "pending_list": list(selectors.approvals_pending()[:10]),
    }
    return render(request, "dashboard.html#dashboard-body" if request.htmx else "dashboard.html", context)


@require_POST
@page(Policy(roles=ANY))
def time_mode(request):
    """How pages show times (UTC, browser-local, relative), kept in the session."""
    from django.shortcuts import redirect
    from django.utils.http import url_has_allowed_host_and_scheme

    from ledger.templatetags.board import TIME_MODES

    mode = request.POST.get("mode", "")
    if mode in TIME_MODES:
        request.session["time_mode"] = mode
    target = request.POST.get("next") or "/"
    if not url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        target = "/"
    return redirect(target)
