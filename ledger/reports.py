"""/reports/ from rollups: SPEC §7 figures per workflow and hour (``ReportRollup``), summed over a window
of whole hours plus the live current hour, and the server-rendered SVG charts.

``hour_figures`` is the one computation of an hour's figures. The sweep stores it for every hour it finds
touched (``services.rollups_refresh``); the page reads the stored hours of its window and computes the
current hour alone from that hour's runs, so its statements grow neither with runs nor with workflows.
Every figure of an hour is about the runs triggered in it: their states, recovery decisions and decision
latencies (a fixed-bucket histogram, so a window's P95 is exact to its bucket), the effects they claimed,
the keys they executed twice and their completions with an unverified effect.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

from django.db.models import Case, Count, IntegerField, Min, Q, Value, When
from django.db.models.functions import TruncHour
from django.utils import timezone

from ledger.domain.effects import EXECUTION_KINDS, UNVERIFIED, first_repeat
from ledger.models import Approval, Effect, LedgerEvent, ReportRollup, Run

# Upper edges (ms) of the decision-latency buckets: bucket i holds EDGES[i-1] < v <= EDGES[i]; one more
# bucket holds what is slower than the last edge. Changing them means recomputing every rollup.
LATENCY_BUCKETS_MS = (1, 2, 3, 5, 7.5, 10, 15, 20, 30, 50, 75, 100, 150, 200, 300, 500, 750, 1000, 1500, 2000,
                      3000, 5000, 10000, 30000, 60000)
COUNTS = ("runs", "completed", "failed", "escalated", "effects", "duplicate_side_effects", "unverified_completions")
# A window is its last ``count`` buckets of ``unit``, the last one the current (partial) bucket.
WINDOWS = {"24h": ("hour", 24), "7d": ("day", 7), "30d": ("day", 30)}
HOUR, DAY = timedelta(hours=1), timedelta(days=1)


def empty() -> dict:
    return {**{name: 0 for name in COUNTS}, "outcomes": {}, "latency_histogram": [0] * (len(LATENCY_BUCKETS_MS) + 1)}


def add(total: dict, part: dict) -> dict:
    """``total`` += ``part`` (both as ``empty()`` gives them); returns ``total``."""
    for name in COUNTS:
        total[name] += part[name]
    for outcome, n in part["outcomes"].items():
        total["outcomes"][outcome] = total["outcomes"].get(outcome, 0) + n
    for i, n in enumerate(part["latency_histogram"]):
        total["latency_histogram"][i] += n
    return total


def latency_bucket(value: float) -> int:
    return bisect_left(LATENCY_BUCKETS_MS, value)


def histogram_percentile(histogram: list[int], q: float) -> tuple[float, float | None] | None:
    """(lower, upper) edge in ms of the bucket holding the ``q`` quantile — the sample at rank
    round(q * (n - 1)), as ``stateboard.stats.percentile`` ranks them; upper None past the last edge."""
    n = sum(histogram)
    if not n:
        return None
    rank, seen = int(round(q * (n - 1))), 0
    for i, count in enumerate(histogram):
        seen += count
        if seen > rank:
            return (LATENCY_BUCKETS_MS[i - 1] if i else 0.0), (LATENCY_BUCKETS_MS[i] if i < len(LATENCY_BUCKETS_MS)
                                                                 else None)
    raise AssertionError("unreachable: the rank is below n")


def _hour_of(field: str):
    return TruncHour(field, tzinfo=dt_timezone.utc)


def _runs_within(path: str, hours: list[datetime] | None, since: datetime | None) -> Q:
    """Rows whose run (``path`` is the run's ``created_at``) was triggered in one of ``hours`` / since ``since``."""
    where = Q()
    if hours is not None:
        where = Q(pk__in=[])  # no hours: no rows
        for hour in hours:
            where |= Q(**{f"{path}__gte": hour, f"{path}__lt": hour + HOUR})
    if since is not None:
        where &= Q(**{f"{path}__gte": since})
    return where


def hour_figures(*, hours: list[datetime] | None = None, since: datetime | None = None) -> dict:
    """{(workflow_id, hour): figures (as ``empty()``)} of the hours runs were triggered in, for the runs of
    ``hours`` (hour starts, UTC) or of every hour since ``since``. Three statements, whatever the runs."""
    latency = Case(When(decision_latency_ms__isnull=True, then=Value(None)),
                   *[When(decision_latency_ms__lte=edge, then=Value(i)) for i, edge in enumerate(LATENCY_BUCKETS_MS)],
                   default=Value(len(LATENCY_BUCKETS_MS)), output_field=IntegerField())
    found: dict = {}

    def figures(workflow_id, hour) -> dict:
        return found.setdefault((workflow_id, hour), empty())

    runs = (Run.objects.filter(_runs_within("created_at", hours, since), staged=False)
            .annotate(hour=_hour_of("created_at"), latency=latency)
            .values("workflow_id", "hour", "state", "decision__outcome", "latency").annotate(n=Count("id")).order_by())
    for row in runs:
        f, n = figures(row["workflow_id"], row["hour"]), row["n"]
        f["runs"] += n
        if row["state"] in ("completed", "failed", "escalated"):
            f[row["state"]] += n
        if row["decision__outcome"] is not None:
            f["outcomes"][row["decision__outcome"]] = f["outcomes"].get(row["decision__outcome"], 0) + n
        if row["latency"] is not None:
            f["latency_histogram"][row["latency"]] += n
    effects = (Effect.objects.filter(_runs_within("run__created_at", hours, since), run__staged=False)
               .annotate(hour=_hour_of("run__created_at")).values("workflow_id", "hour")
               .annotate(n=Count("id"), unverified=Count("run_id", distinct=True, filter=Q(
                   run__state="completed", status__in=UNVERIFIED))).order_by())
    for row in effects:
        f = figures(row["workflow_id"], row["hour"])
        f["effects"], f["unverified_completions"] = row["n"], row["unverified"]
    # Keys executed twice, counted in the hour of the run that repeated the execution: the history of every
    # key those runs executed more than once at all (rare), walked by the rule in ledger.domain.effects.
    executions = LedgerEvent.objects.filter(kind__in=EXECUTION_KINDS, run__staged=False).exclude(idempotency_key="")
    keys = executions.filter(_runs_within("run__created_at", hours, since)).values("idempotency_key")
    # Read first (a few keys at most): as a subquery the planner scans every event to join them.
    repeated = list(executions.filter(idempotency_key__in=keys).values("idempotency_key")
                    .annotate(n=Count("id")).filter(n__gt=1).values_list("idempotency_key", flat=True))
    history = () if not repeated else (LedgerEvent.objects.filter(idempotency_key__in=repeated, kind__in=(*EXECUTION_KINDS, "failed"),
                                          run__staged=False)
               .annotate(hour=_hour_of("run__created_at"))
               .order_by("idempotency_key", "at", "id")
               .values_list("idempotency_key", "kind", "reason_code", "run__workflow_id", "hour"))
    by_key: dict[str, list] = {}
    for key, kind, reason_code, workflow_id, hour in history:
        by_key.setdefault(key, []).append((kind, reason_code, (workflow_id, hour)))
    wanted = set(hours) if hours is not None else None
    for events in by_key.values():
        repeat = first_repeat(events)
        if repeat and (wanted is None or repeat[1] in wanted) and (since is None or repeat[1] >= since):
            figures(*repeat)["duplicate_side_effects"] += 1
    return found


def _bucket_starts(window: str, now: datetime) -> tuple[str, list[datetime], datetime]:
    """(unit, the window's bucket starts, the current hour's start)."""
    unit, count = WINDOWS[window]
    current_hour = now.astimezone(dt_timezone.utc).replace(minute=0, second=0, microsecond=0)
    step = HOUR if unit == "hour" else DAY
    last = current_hour if unit == "hour" else current_hour.replace(hour=0)
    return unit, [last - step * (count - 1 - i) for i in range(count)], current_hour


def window_series(*, window: str, now: datetime | None = None) -> dict:
    """The window's figures per workflow and bucket: the stored rollups of its whole hours (one read) and
    the current hour computed from its own runs (``hour_figures``)."""
    now = now or timezone.now()
    unit, starts, current_hour = _bucket_starts(window, now)
    fields = ("workflow_id", "hour", *COUNTS, "outcomes", "latency_histogram")
    stored = (ReportRollup.objects.filter(hour__gte=starts[0], hour__lt=current_hour).values_list(*fields))
    hours = [(row[0], row[1], dict(zip(fields[2:], row[2:]))) for row in stored]
    hours += [(workflow_id, hour, f) for (workflow_id, hour), f in hour_figures(hours=[current_hour]).items()]
    series: dict[int, list[dict]] = {}
    for workflow_id, hour, f in hours:
        buckets = series.setdefault(workflow_id, [empty() for _ in starts])
        add(buckets[bisect_right(starts, hour) - 1], f)
    return {"since": starts[0], "now": now, "unit": unit, "starts": starts, "series": series}


def open_approvals(*, now: datetime) -> dict:
    """{workflow_id: (pending approval requests, the oldest one's age in seconds)}: a gauge, not windowed."""
    rows = (Approval.objects.filter(status="pending").values("run__workflow_id")
            .annotate(n=Count("id"), oldest=Min("created_at")).order_by())
    return {row["run__workflow_id"]: (row["n"], (now - row["oldest"]).total_seconds()) for row in rows}


def figures_of(total: dict, approvals: tuple[int, float] = (0, 0.0)) -> dict:
    """The figures the reports show (the names of ``metrics_selectors.metrics``) from a sum of rollups."""
    p95 = histogram_percentile(total["latency_histogram"], 0.95)
    effects, completed = total["effects"], total["completed"]
    return {
        "runs": total["runs"], "effects": effects,
        "duplicate_side_effects": total["duplicate_side_effects"],
        "duplicate_side_effect_rate": total["duplicate_side_effects"] / effects if effects else 0.0,
        "unverified_completions": total["unverified_completions"],
        "unverified_completion_rate": total["unverified_completions"] / completed if completed else 0.0,
        "recovery_decisions": dict(sorted(total["outcomes"].items())),
        "p95_trigger_to_decision_ms": (p95[1] if p95[1] is not None else p95[0]) if p95 else None,
        "p95_bucket_ms": p95, "trigger_to_decision_samples": sum(total["latency_histogram"]),
        "open_approvals": approvals[0], "open_approvals_max_age_seconds": approvals[1],
        "escalated_runs": total["escalated"], "failed_runs": total["failed"],
    }


def p95_of(bucket: dict) -> float | None:
    """A bucket's P95 decision latency as its bucket's upper edge (the lower one past the last edge)."""
    p95 = histogram_percentile(bucket["latency_histogram"], 0.95)
    return None if p95 is None else (p95[1] if p95[1] is not None else p95[0])


# ---------------------------------------------------------------- charts

def _nice_top(value: float) -> float:
    """The smallest 1, 2, 2.5 or 5 × 10^k at or above ``value`` (1 for nothing)."""
    if value <= 0:
        return 1
    magnitude = 10 ** math.floor(math.log10(value))
    return next(step * magnitude for step in (1, 2, 2.5, 5, 10) if step * magnitude >= value)


def _number(value: float) -> str:
    return f"{value:,.0f}" if value == int(value) else f"{value:,.1f}"


def _bucket_label(start: datetime, unit: str) -> str:
    return start.strftime("%H:%M") if unit == "hour" else start.strftime("%b %d")


def bar_chart(values: list[float | None], *, starts: list[datetime], unit: str, title: str, caption: str,
              value_unit: str = "", width: int = 600, height: int = 170, line: float | None = None) -> dict:
    """Bars (None: no data, drawn as nothing) with a labelled y axis (0, half, top) and x labels under
    every few buckets (hours for a day, days for a week or a month); each bar's title says its bucket and value."""
    pad_l, pad_r, pad_b, pad_t = 52, 8, 30, 10
    top = _nice_top(max([v for v in values if v is not None] + ([line] if line is not None else []) or [0]))
    inner_w, inner_h = width - pad_l - pad_r, height - pad_b - pad_t
    axis_y = pad_t + inner_h
    bar_w = inner_w / max(len(values), 1)
    every = 6 if unit == "hour" else (1 if len(values) <= 7 else 5)
    suffix = f" {value_unit}" if value_unit else ""
    bars, x_ticks = [], []
    for i, (value, start) in enumerate(zip(values, starts)):
        h = 0 if value is None else inner_h * value / top
        when = start.strftime("%Y-%m-%d %H:00 UTC" if unit == "hour" else "%Y-%m-%d UTC")
        bars.append({"x": round(pad_l + i * bar_w + 1, 1), "y": round(axis_y - h, 1), "w": round(max(bar_w - 2, 1), 1),
                     "h": round(h, 1), "value": value,
                     "title": f"{when}: {'no data' if value is None else _number(value) + suffix}"})
        if i % every == 0:
            x_ticks.append({"x": round(pad_l + (i + 0.5) * bar_w, 1), "label": _bucket_label(start, unit)})
    y_ticks = [{"y": round(axis_y - inner_h * f, 1), "label": _number(top * f)} for f in (0, 0.5, 1)]
    drawn_line = None if line is None else {"y": round(axis_y - inner_h * line / top, 1), "label": _number(line)}
    return {"line": drawn_line, "title": title, "caption": caption, "width": width, "height": height, "bars": bars,
            "axis_y": axis_y, "pad_l": pad_l, "right": width - pad_r, "y_ticks": y_ticks, "x_ticks": x_ticks,
            "label_y": height - 12, "value_unit": value_unit,
            "span": f"{_bucket_label(starts[0], unit)} – now, one bar per {unit} (UTC)"}
