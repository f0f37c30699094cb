"""Series for /reports/: SPEC §7 figures per workflow over a window, and server-rendered SVG charts.

Headline figures come from ``selectors.metrics`` (their one home); the series split the window into
buckets with two grouped reads, whatever the number of runs.
"""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from ledger.models import Run
from stateboard.stats import percentile

WINDOWS = {"24h": (timedelta(hours=24), 24), "7d": (timedelta(days=7), 28), "30d": (timedelta(days=30), 30)}


def series(*, window: str, now=None) -> dict:
    """Per workflow and bucket: runs triggered, completed, failed or escalated, P95 trigger→decision (ms)."""
    span, count = WINDOWS[window]
    now = now or timezone.now()
    since = now - span
    step = span / count
    starts = [since + step * i for i in range(count)]
    rows = (Run.objects.filter(created_at__gte=since)
            .values_list("workflow__slug", "created_at", "decided_at", "state")[:50000])
    per: dict[str, list[dict]] = {}
    latencies: dict[tuple[str, int], list[float]] = {}
    for slug, created, decided, state in rows:
        buckets = per.setdefault(slug, [{"runs": 0, "completed": 0, "failed": 0, "escalated": 0}
                                        for _ in range(count)])
        i = min(int((created - since) / step), count - 1)
        buckets[i]["runs"] += 1
        if state in ("completed", "failed", "escalated"):
            buckets[i][state] += 1
        if decided:
            latencies.setdefault((slug, i), []).append((decided - created).total_seconds() * 1000)
    for slug, buckets in per.items():
        for i, bucket in enumerate(buckets):
            bucket["p95_ms"] = percentile(latencies.get((slug, i), []), 0.95)
    return {"since": since, "now": now, "starts": starts, "workflows": per}


def bar_chart(values: list[float], *, labels: tuple[str, str], title: str, width: int = 560,
              height: int = 140) -> dict:
    """Bars (None: no data, drawn as a gap) with the max on the axis; numbers in every bar's title."""
    pad_l, pad_b, pad_t = 44, 18, 10
    top = max([v for v in values if v is not None] or [0]) or 1
    inner_w, inner_h = width - pad_l - 8, height - pad_b - pad_t
    bar_w = inner_w / max(len(values), 1)
    bars = []
    for i, value in enumerate(values):
        h = 0 if value is None else inner_h * value / top
        bars.append({"x": round(pad_l + i * bar_w + 1, 1), "y": round(pad_t + inner_h - h, 1),
                     "w": round(max(bar_w - 2, 1), 1), "h": round(h, 1), "value": value, "empty": value is None})
    return {"title": title, "width": width, "height": height, "bars": bars, "top": round(top, 1),
            "axis_y": pad_t + inner_h, "pad_l": pad_l, "first": labels[0], "last": labels[1],
            "total": round(sum(v for v in values if v is not None), 1)}
