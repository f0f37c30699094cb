"""The product's home pages across both apps: the dashboard, the Prometheus text, the time-display choice."""

from datetime import timedelta
from decimal import Decimal

from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from ledger import metrics_selectors, selectors
from ledger.models import TERMINAL_STATES, RunState
from ledger.templatetags.board import TIME_MODES
from stateboard.policy import ANY, Policy, page, safe_next


def _prometheus_label(value) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _prometheus_value(value) -> str:
    if isinstance(value, Decimal):  # money (SPEC §16): its digits, never through a float
        return format(value.normalize(), "f") if value else "0"
    return repr(float(value)) if isinstance(value, float) else str(int(value))


@require_GET
def prometheus_metrics(request):
    """Public: the SPEC §7 figures in the Prometheus text format (0.0.4); figures without data left out."""
    lines = []
    for name, help_text, kind, samples in metrics_selectors.prometheus_samples():
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


# The dashboard's windows (SPEC §15: counts for a window, 24 h by default); another value is the default.
WINDOWS = {"1h": ("1 h", timedelta(hours=1)), "24h": ("24 h", timedelta(hours=24)),
           "7d": ("7 days", timedelta(days=7)), "30d": ("30 days", timedelta(days=30))}
DEFAULT_WINDOW = "24h"


@require_GET
@page(Policy(roles=ANY))
def dashboard(request):
    """Home: runs created in the window (``?window=``, 24 h by default) by state, the pending approvals,
    the latest runs."""
    window = request.GET.get("window") if request.GET.get("window") in WINDOWS else DEFAULT_WINDOW
    since = timezone.now() - WINDOWS[window][1]
    summary = selectors.dashboard_summary(since=since)
    counts = summary["state_counts"]
    # States no run is in are named in one line, not drawn as tiles of 0 (most are passed in an instant).
    state_counts = [{"state": s, "n": counts[s], "terminal": s in TERMINAL_STATES} for s in RunState.values
                    if counts.get(s)]
    context = {
        **summary,
        "poll": bool(summary["pending_approvals"]) or any(
            counts.get(s, 0) for s in RunState.values if s not in TERMINAL_STATES),
        "state_counts": state_counts,
        "empty_states": [s for s in RunState.values if not counts.get(s)],
        "total_runs": sum(counts.values()),
        "window": window, "window_words": WINDOWS[window][0], "windows": [(k, w[0]) for k, w in WINDOWS.items()],
        "since": since, "since_param": since.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "pending_list": list(selectors.approvals_pending()[:10]),
        "needs": selectors.needs_human(user=request.user),
    }
    return render(request, "dashboard.html#dashboard-body" if request.htmx else "dashboard.html", context)


@require_POST
@page(Policy(roles=ANY))
def time_mode(request):
    """How pages show times (UTC, browser-local, relative), kept in the session."""
    mode = request.POST.get("mode", "")
    if mode in TIME_MODES:
        request.session["time_mode"] = mode
    return redirect(safe_next(request, "/"))

