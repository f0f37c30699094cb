"""``python manage.py bench pages``: server time and SQL statements of the operator's pages with the
ledger loaded at scale. It prints figures, it asserts nothing.

In the scratch database (``common.scratch_database``, made by the dispatcher): ``scale`` x 100,000 runs
and ~1,000,000 events COPYed by ``loader.LedgerHistory``, then through the services a run with 500
events (and runs with 50 and 2,000 for the growth figure) and some pending approvals. Each page is
rendered in this process by Django's test ``Client`` logged in as an editor
(``identities.operator_create``): one warm-up request, then ``samples`` timed requests (p50 / p95 of
the wall time of ``client.get``) and one more under ``CaptureQueriesContext`` for the statement count.
With ``runs`` (default ``scale`` x 1,000,000) in the run table — the history and bare labelled runs
(``attributes.labelled_runs_load``) — the first page of the attribute filters (SPEC §15: ≤ 1 % matching,
p95 ≤ 300 ms), on the page and the API, and PostgreSQL's plan of it (the GIN index, not a scan). Last,
the alert evaluator's pass with 100 rules over that ledger (``alerts``).
"""

from __future__ import annotations

import time
import uuid

from django.conf import settings
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from ledger import services
from ledger.identities import operator_create
from ledger.models import Run, Workflow
from ledger.ops.bench import alerts, attributes
from ledger.ops.bench.appends import STREAM_STAGES, STREAM_WORKFLOW, plain_body, stream_workflow
from ledger.ops.bench.common import Out, Report, Row, loadavg, percentile, ratio, verdict
from ledger.ops.bench.loader import LedgerHistory

FULL_RUNS = 100_000
FULL_EVENTS = 1_000_000
FULL_APPROVALS = 200  # the inbox lists up to 200 pending requests
SAMPLES = 30
TARGET_RUN_PAGE_GROWTH = 1.5  # p95 of the run page at 2,000 events / at 50 events
APPROVAL_WORKFLOW = "bench-pages-approve"
ACTOR = "agent:bench-pages"


def _run_with_events(n: int) -> str:
    """A run of the stream workflow with ``n`` events (system events included), appended in batches."""
    run, _ = services.run_trigger(workflow_slug=STREAM_WORKFLOW, inputs={"item": uuid.uuid4().hex},
                                  intent=f"pages/{n}/{uuid.uuid4().hex[:8]}", env_fingerprint="img:1", actor=ACTOR)
    services.event_append(run_id=run.id, body={"stage": STREAM_STAGES[0], "kind": "started"}, actor=ACTOR)
    have = Run.objects.values_list("event_count", flat=True).get(id=run.id)
    while have < n:
        size = min(20, n - have)
        services.events_append(run_id=run.id, bodies=[plain_body(STREAM_STAGES[0]) for _ in range(size)], actor=ACTOR)
        have += size
    return str(run.id)


def _pending_approvals(n: int) -> None:
    """``n`` runs of a two-stage workflow waiting for a high-impact approval of their second stage."""
    Workflow.objects.get_or_create(
        slug=APPROVAL_WORKFLOW, defaults={"title": "Bench approvals", "stages": ["draft", "publish"],
                                          "effect_stages": ["publish"], "approval_stages": ["publish"],
                                          "lease_seconds": 3600})
    for i in range(n):
        run, _ = services.run_trigger(workflow_slug=APPROVAL_WORKFLOW, inputs={"item": i},
                                      intent=f"approve/{i:05d}", env_fingerprint="img:1", actor=ACTOR)
        services.event_append(run_id=run.id, body={"stage": "draft", "kind": "started"}, actor=ACTOR)
        services.event_append(run_id=run.id, body={"stage": "draft", "kind": "succeeded"}, actor=ACTOR)
        services.approval_request(run_id=run.id, kind="high_impact", stage="publish", actor=ACTOR,
                                  action={"system": "cms", "operation": "publish", "target": f"page-{i}",
                                          "summary": f"publish page {i}"})


def _measure(client, path: str, samples: int) -> dict:
    """p50 / p95 (ms) of ``samples`` GETs of ``path`` after one warm-up, and one request's statement count."""
    def get():
        response = client.get(path)
        if response.status_code != 200:
            raise AssertionError(f"GET {path} answered {response.status_code}: {response.content[:300]!r}")

    get()
    times = []
    for _ in range(samples):
        started = time.perf_counter()
        get()
        times.append((time.perf_counter() - started) * 1000)
    with CaptureQueriesContext(connection) as captured:
        get()
    return {"p50": percentile(times, 0.5), "p95": percentile(times, 0.95), "queries": len(captured.captured_queries)}


def run(*, out, scale: float = 1.0, samples: int | None = None, runs: int | None = None) -> Report:
    """Load, render, print (see the module docstring); returns the report (``figures`` by page)."""
    say = Out(out)
    samples = samples or max(5, min(SAMPLES, int(SAMPLES * scale ** 0.25)))
    n_runs, n_events = max(100, int(FULL_RUNS * scale)), max(1000, int(FULL_EVENTS * scale))
    n_approvals = max(5, int(FULL_APPROVALS * min(scale, 1.0)))
    debug_was = settings.DEBUG
    settings.DEBUG = False
    t_start = time.perf_counter()
    try:
        say(f"pages bench: scale {scale:g}; loading ~{n_events:,} events / {n_runs:,} runs by COPY, "
            f"{n_approvals} pending approvals; {samples} timed requests per page")
        loader = LedgerHistory(say)
        loader.load(events_target=n_events, runs_target=n_runs, label="pages")
        stream_workflow()
        started = time.perf_counter()
        run50, run500, run2000 = (_run_with_events(n) for n in (50, 500, 2000))
        _pending_approvals(n_approvals)
        say(f"  runs with 50 / 500 / 2,000 events and {n_approvals} approvals through the services in "
            f"{time.perf_counter() - started:.1f} s")
        started = time.perf_counter()
        rows = services.rollups_refresh()  # the loader writes rows directly: the reports' sweep catches up
        say(f"  the reports' rollups of the loaded history: {rows} rows in {time.perf_counter() - started:.1f} s")
        total_runs = runs if runs is not None else max(1000, int(1_000_000 * scale))
        attributes.labelled_runs_load(total_runs - Run.objects.count(), say)
        user, _ = operator_create(name=f"bench-pages-{uuid.uuid4().hex[:6]}", role="editor")
        client = Client(HTTP_HOST="127.0.0.1")
        client.force_login(user)
        pages = [("runs list", "/runs/"), ("run detail, 500 events", f"/runs/{run500}/"),
                 ("approvals inbox", "/approvals/"), ("on-call", "/oncall/"), ("compare", f"/runs/compare/?a={run50}&b={run500}"),
                 ("reports", "/reports/"), ("run detail, 50 events", f"/runs/{run50}/"),
                 ("run detail, 2,000 events", f"/runs/{run2000}/"),
                 *((f"/runs/ {label}", f"/runs/?{query}") for label, query in attributes.FILTERS),
                 *((f"API {label}", f"/api/v1/runs/?{query}") for label, query in attributes.FILTERS)]
        report = Report()
        for label, path in pages:
            m = _measure(client, path, samples)
            report.figures[label] = m
            say(f"  {label:26s} {path[:60]:60s} p50 {m['p50']:8.2f} ms  p95 {m['p95']:8.2f} ms  "
                f"{m['queries']} statements")
        plans = {query: attributes.plan(query) for _, query in attributes.FILTERS}
        rare = attributes.FILTERS[-1][1]
        say(f"  the plan of the runs page's first page with {rare}:")
        for line in plans[rare]:
            say(f"    {line}")
        report.figures["attributes_index"] = attributes.uses_the_index(plans[rare]) and all(
            attributes.scans_no_run_table(lines) for lines in plans.values())
        report.figures["runs_in_table"] = Run.objects.count()
        rules = alerts.rules_load(loader.workflows)
        report.figures["alerts"] = alerts.evaluate(say, samples=max(3, samples // 6)) | {"rules": rules}
    finally:
        settings.DEBUG = debug_was
    total = f"{report.figures['runs_in_table']:,} runs / {loader.totals['events']:,} events"
    for label, _ in pages[:6]:
        m = report.figures[label]
        report.add(Row(f"{label}: p50 / p95, statements", f"{m['p50']:.1f} / {m['p95']:.1f} ms, {m['queries']}",
                       "", "", "(info)", ""))
    small, big = report.figures["run detail, 50 events"], report.figures["run detail, 2,000 events"]
    growth = ratio(big["p95"], small["p95"])
    report.figures["run_page_growth"] = growth
    report.add(Row("run detail p95, 2,000 events", f"{big['p95']:.1f} ms", f"50 events {small['p95']:.1f} ms",
                   f"{growth:.2f}x", f"<= {TARGET_RUN_PAGE_GROWTH:g}x", verdict(growth <= TARGET_RUN_PAGE_GROWTH)))
    for label in (label for label, _ in pages if "attribute filter" in label):
        m = report.figures[label]
        report.add(Row(f"{label}: p95, statements", f"{m['p95']:.1f} ms, {m['queries']}", f"p50 {m['p50']:.1f} ms",
                       "", f"<= {attributes.TARGET_P95_MS:g} ms", verdict(m["p95"] <= attributes.TARGET_P95_MS)))
    index, scanned = report.figures["attributes_index"], report.figures["runs_in_table"] < attributes.INDEXED_FROM
    report.add(Row("attribute filters' plans: the GIN index, no scan", str(index), "", "",
                   "(info: a small table is scanned)" if scanned else "True", "" if scanned else verdict(index)))
    a = report.figures["alerts"]
    report.add(Row(f"alert evaluation, {a['rules']} rules: a pass p95, statements", f"{a['p95']:.2f} s, "
                   f"{a['statements']}", f"first pass {a['first_seconds']:.2f} s, {a['opened']} opened", "",
                   f"<= {alerts.TARGET_PASS_SECONDS:g} s", verdict(a["p95"] <= alerts.TARGET_PASS_SECONDS)))
    say("")
    say(f"== summary (server time in this process, {samples} requests each, with {total} loaded; "
        f"{time.perf_counter() - t_start:.0f} s; load average {loadavg()}) ==")
    for line in report.table():
        say(line)
    return report
