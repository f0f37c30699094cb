"""/reports/ from the hourly rollups: the same figures as a scan of the runs, the sweep idempotent and safe
to run at once, the statements constant, and the P95 chart drawn from the decision latency per bucket."""

import random
import re
import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.urls import reverse
from django.utils import timezone

from ledger import metrics_selectors, reports, services
from ledger.models import Approval, LedgerEvent, ReportRollup, Run
from stateboard.stats import percentile
from tests.factories import (
    HX,
    OUTSIDE_ASSET,
    assert_queries_flat,
    client_for,
    login,
    make_agent,
    make_workflow,
    page_queries,
    texts,
)
from tests.ledger.helpers import AgentDriver
from tests.ledger.web.test_run_page import long_run

pytestmark = pytest.mark.django_db


def _hour(now, hours_ago: int):
    return now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=hours_ago)


def _trigger(wf, intent: str, *, hours_ago: int = 0, latency_ms: float | None = None, **inputs):
    """A run of ``wf`` moved ``hours_ago`` whole hours back (to minute 10 of that hour), with a latency."""
    run, _ = services.run_trigger(workflow_slug=wf.slug, inputs=inputs, intent=intent, actor="agent:a")
    if hours_ago:
        Run.objects.filter(id=run.id).update(created_at=_hour(timezone.now(), hours_ago) + timedelta(minutes=10))
    if latency_ms is not None:
        Run.objects.filter(id=run.id).update(decision_latency_ms=latency_ms)
    return run


def _history():
    """Two workflows with runs 3 and 5 hours back: effects, an unverified completion, a key executed twice,
    a failed run, latencies, a pending approval; and a third workflow with no runs."""
    busy = make_workflow(stages=["build"], effect_stages=["build"], approval_stages=[])
    quiet = make_workflow(stages=["build"])
    make_workflow()
    for n in range(6):
        run = _trigger(busy, f"b-{n}", hours_ago=3 if n < 4 else 5, latency_ms=4.0 * (n + 1), n=n)
        services.event_append(run_id=run.id, body={"stage": "build", "kind": "started"}, actor="agent:a")
        if n:
            last = services.event_append(run_id=run.id, body={"stage": "build", "kind": "succeeded", "effect": {
                "system": "git", "operation": "push", "reference": f"r{n}"}}, actor="agent:a")
    LedgerEvent.objects.create(  # what a broken claim would let through: the last key executed again
        run_id=run.id, intent=run.intent, seq=Run.objects.get(id=run.id).event_count + 1, at=timezone.now(), stage="build",
        kind="succeeded", actor="agent:x", input_fingerprint=run.input_fingerprint, policy_version="1",
        idempotency_key=last[0].idempotency_key, hash="0" * 64)
    failed = _trigger(quiet, "q", hours_ago=3, latency_ms=250.0)
    services.event_append(run_id=failed.id, body={"stage": "build", "kind": "started"}, actor="agent:a")
    services.event_append(run_id=failed.id, body={"stage": "build", "kind": "failed"}, actor="agent:a")
    now = timezone.now()
    Approval.objects.create(kind=Approval.Kind.HIGH_IMPACT, run=failed, stage="build", action={}, status="pending",
                            action_digest="d", policy_version="v1", input_fingerprint=failed.input_fingerprint,
                            requested_by="agent:a", created_at=now - timedelta(minutes=3),
                            deadline=now + timedelta(hours=1))
    return busy, quiet


def _window_figures(window: str) -> dict:
    """{workflow id: figures} of the window as the page computes them."""
    data = reports.window_series(window=window)
    approvals = reports.open_approvals(now=data["now"])
    figures = {}
    for workflow_id, buckets in data["series"].items():
        total = reports.empty()
        for bucket in buckets:
            reports.add(total, bucket)
        figures[workflow_id] = reports.figures_of(total, approvals.get(workflow_id, (0, 0.0)))
    return figures, data


def test_rollups_give_the_figures_a_scan_of_the_runs_gives():
    """Per workflow, the rollups of whole hours plus the live hour equal ``metrics_selectors.metrics`` over the same
    window; the P95 is the bucket that holds the scanned P95."""
    busy, quiet = _history()
    assert services.rollups_refresh() >= 3  # hours 3 and 5 of busy, hour 3 of quiet
    _trigger(busy, "live", latency_ms=900.0)  # the current hour: never stored, computed by the page
    figures, data = _window_figures("24h")
    now = timezone.now()
    for wf in (busy, quiet):
        scanned = metrics_selectors.metrics(workflow_slug=wf.slug, since=data["since"], now=now)
        mine = figures[wf.id]
        for name in ("runs", "effects", "duplicate_side_effects", "unverified_completions", "recovery_decisions",
                     "failed_runs", "escalated_runs", "open_approvals", "trigger_to_decision_samples"):
            assert mine[name] == scanned[name], (wf.slug, name)
        low, high = mine["p95_bucket_ms"]
        assert low < scanned["p95_trigger_to_decision_ms"] <= high
    assert figures[busy.id]["runs"] == 7 and figures[busy.id]["duplicate_side_effects"] == 1
    assert figures[busy.id]["effects"] == 6 and figures[quiet.id]["failed_runs"] == 1
    assert figures[quiet.id]["open_approvals"] == 1 and figures[quiet.id]["p95_bucket_ms"] == (200, 300)


def test_the_sweep_is_idempotent_and_recomputes_only_what_it_must():
    """A second pass writes the same rows; an event on an old hour's run recomputes that hour."""
    busy, _ = _history()
    services.rollups_refresh()
    fields = ("workflow_id", "hour", *reports.COUNTS, "outcomes", "latency_histogram")
    first = sorted(ReportRollup.objects.values_list(*fields))
    services.rollups_refresh()
    assert sorted(ReportRollup.objects.values_list(*fields)) == first
    old = Run.objects.filter(workflow=busy, intent="b-0").get()
    hour = old.created_at.replace(minute=0, second=0, microsecond=0)
    assert ReportRollup.objects.get(workflow=busy, hour=hour).failed == 0
    services.event_append(run_id=old.id, body={"stage": "build", "kind": "failed"}, actor="agent:a")
    assert Run.objects.get(id=old.id).state == "failed"
    services.rollups_refresh()
    assert ReportRollup.objects.get(workflow=busy, hour=hour).failed == 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_sweeps_write_what_one_sweep_writes():
    """Four passes at once (as two beats and two workers would run them) leave the rows one pass leaves."""
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL (several connections)")
    _history()
    errors = []

    def sweep():
        try:
            services.rollups_refresh()
        except Exception as exc:  # noqa: BLE001  reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=sweep) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors
    fields = ("workflow_id", "hour", *reports.COUNTS, "outcomes", "latency_histogram")
    together = sorted(ReportRollup.objects.values_list(*fields))
    ReportRollup.objects.all().delete()
    services.rollups_refresh()
    assert together == sorted(ReportRollup.objects.values_list(*fields)) and len(together) == 3


def test_histogram_percentile_is_the_bucket_of_the_exact_percentile():
    rng = random.Random(7)
    for _ in range(200):
        values = [rng.choice([rng.uniform(0, 3), rng.uniform(0, 400), rng.expovariate(0.01), 70000.0])
                  for _ in range(rng.randint(1, 60))]
        histogram = [0] * (len(reports.LATENCY_BUCKETS_MS) + 1)
        for value in values:
            histogram[reports.latency_bucket(value)] += 1
        low, high = reports.histogram_percentile(histogram, 0.95)
        exact = percentile(values, 0.95)
        assert (low < exact <= high) if high is not None else exact > low
    assert reports.histogram_percentile([0] * 3, 0.95) is None


def test_reports_statements_do_not_grow_with_workflows_or_with_stored_hours():
    viewer, _ = login("viewer")

    def add_workflow(n):
        wf = make_workflow(stages=["build"], effect_stages=["build"], approval_stages=[])
        for hours_ago in (0, 2 + n, 30 + n):  # the live hour, an hour of the day, an hour of the week
            _trigger(wf, f"w-{n}-{hours_ago}", hours_ago=hours_ago, latency_ms=3.0 * (n + 1))
        services.rollups_refresh()

    for window in ("24h", "7d", "30d"):
        ReportRollup.objects.all().delete()
        few = assert_queries_flat(viewer, f"{reverse('ledger:reports')}?window={window}", add_workflow, rows=5)
        assert few <= 16, few  # sign-in 3, the badge 1, knowledge 4, rollups 1, the live hour 3, approvals 1, replay 1,
        # workflows 1, what they spent 1 (SPEC §16)
    assert page_queries(viewer, reverse("ledger:reports"), **HX) <= 16


def test_reports_p95_chart_is_the_decision_latency_per_hour_on_a_window_that_fits():
    """24 h: 24 hourly bars, the P95 of each hour's decision latencies (to its bucket), labelled axes, no
    "total" for a percentile; 7 d and 30 d: daily bars."""
    wf = make_workflow(stages=["build"])
    for n, latency in enumerate((4.0, 6.0, 40.0)):
        _trigger(wf, f"p-{n}", hours_ago=2, latency_ms=latency)
    _trigger(wf, "p-now", latency_ms=12.0)
    services.rollups_refresh()
    viewer, _ = login("viewer")
    html = texts(viewer.get(reverse("ledger:reports"), {"window": "24h"}))
    section = html.split(f'data-workflow="{wf.slug}"', 1)[1].split("</section>", 1)[0]
    charts = section.split("<figure")[1:]
    assert len(charts) == 4
    p95_chart = next(chart for chart in charts if "P95 decision latency per hour" in chart)
    assert "total" not in p95_chart and "window P95 ≤ 50 ms" in p95_chart
    two_hours_ago = _hour(timezone.now(), 2).strftime("%Y-%m-%d %H:00 UTC")
    titles = re.findall(r"<title>([^<]+)</title>", p95_chart)
    assert f"{two_hours_ago}: 50 ms" in titles and any(t.endswith(": 15 ms") for t in titles)
    assert len(re.findall(r'class="bar"', p95_chart)) == 2 and p95_chart.count("<title>") == 2
    assert re.search(r">\d\d:00</text>", p95_chart) and ">0</text>" in p95_chart and ">50</text>" in p95_chart
    runs_chart = next(chart for chart in charts if "Runs triggered" in chart)
    assert "4 in the window" in runs_chart
    assert "≤ 50 ms" in section  # the headline figure: the window's P95, the upper edge of its bucket
    for window, bars in (("7d", 7), ("30d", 30)):
        data = reports.window_series(window=window)
        assert len(data["starts"]) == bars and data["unit"] == "day"
        assert sum(b["runs"] for b in data["series"][wf.id]) == 4
    assert len(reports.window_series(window="24h")["starts"]) == 24


def test_reports_page_counts_a_run_through_the_api_in_the_live_hour(django_capture_on_commit_callbacks):
    """A trigger over HTTP (its latency measured by the API once committed) shows on /reports/ before any sweep."""
    wf = make_workflow(stages=["build"])
    _, token = make_agent()
    with django_capture_on_commit_callbacks(execute=True):
        AgentDriver(client_for(token), wf.slug).trigger()
    assert not ReportRollup.objects.exists()
    figures, _ = _window_figures("24h")
    assert figures[wf.id]["runs"] == 1 and figures[wf.id]["trigger_to_decision_samples"] == 1


def test_reports_page_draws_charts_per_workflow_with_a_window():
    _, run = long_run(2, "r")
    viewer, _ = login("viewer")
    for window in ("24h", "7d", "30d"):
        for extra in ({}, HX):
            html = texts(viewer.get(reverse("ledger:reports"), {"window": window}, **extra))
            assert f'data-window="{window}"' in html and 'class="bar"' in html and "<svg" in html
            assert "P95 trigger → decision" in html and "Duplicate side-effect rate" in html
    html = texts(viewer.get(reverse("ledger:reports")))
    assert 'href="/metrics"' in html and 'href="/api/v1/metrics/"' in html
    assert not OUTSIDE_ASSET.search(html) and "<script>" not in html


def test_reports_query_count_is_constant_in_runs():
    viewer, _ = login("viewer")
    wf = make_workflow()
    for n in range(2):
        services.run_trigger(workflow_slug=wf.slug, inputs={}, intent=f"m-{n}")
    few = page_queries(viewer, reverse("ledger:reports"))
    for n in range(2, 10):
        services.run_trigger(workflow_slug=wf.slug, inputs={}, intent=f"m-{n}")
    assert page_queries(viewer, reverse("ledger:reports")) == few


def test_reports_query_count_is_constant_in_workflows():
    viewer, _ = login("viewer")

    def add_workflow(n):
        wf = make_workflow()
        services.run_trigger(workflow_slug=wf.slug, inputs={}, intent=f"w-{n}")

    assert_queries_flat(viewer, reverse("ledger:reports"), add_workflow, rows=6)
