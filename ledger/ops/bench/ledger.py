"""``python manage.py bench ledger``: the ledger's figures, each beside a baseline measured in the
same run. It prints figures, it asserts nothing.

Everything runs in a scratch database created on the server of DATABASE_URL and dropped at the end
(``keep=True`` keeps it), so the bulk data never touches a real ledger (whose rows cannot be deleted
anyway). Each figure is the median of ``reps`` repetitions:

- raw baseline: psycopg single-row ``INSERT`` + ``COMMIT`` into a plain table, 1 and N clients;
- event appends through ``services.event_append`` (each client its own process and connection): a
  realistic stream (each client drives its own runs through a 20-stage workflow: ``started`` /
  ``succeeded`` on non-effect stages, ``started`` / ``succeeded`` / ``verified`` on the 3 effect
  stages, every event with a ``client_event_id``) and a plain append (``proposed`` on an executing
  stage: one event, no transition, no checkpoint);
- the same two streams through the HTTP API served as ``manage.py up`` serves it (``stateboard.webserver``:
  granian, workers = cores, 4 threads; clients on keep-alive HTTP/1.1 connections), the same plain
  append with the pool off (persistent connections) and served by the other server (gunicorn), one
  client's p95, batches of 20 events and a duplicate trigger's p50 (the raw baseline is measured again
  beside each of the three servers started);
- batches of 20 through ``services.events_append``; new triggers of 16 intents of one workflow from N
  clients under the intent lock beside the former per-workflow lock; statements per request;
- ``services.checkpoint_save`` + ``selectors.checkpoint_latest`` pairs;
- the recovery decision's read path and a full ``run_trigger`` rolled back, with ~10k and ~1M
  ledger events loaded by COPY (``loader.LedgerHistory``), plus the EXPLAIN of the read path at 1M.
"""

from __future__ import annotations

import os
import time
import uuid

from django.conf import settings
from django.db import connection

from ledger.identities import agent_create
from ledger.ops.bench import agentpath, appends, decisions
from ledger.ops.bench.appends import CALLS_PER_RUN, EFFECT_STAGES, STREAM_STAGES
from ledger.ops.bench.common import (
    Out,
    Report,
    Row,
    loadavg,
    measure_raw,
    median,
    rate,
    ratio,
    raw_table,
    scratch_database,
    verdict,
)
from ledger.ops.bench.loader import LedgerHistory
from stateboard.webserver import SERVERS, server_name

TARGET_APPEND = 0.50  # a plain append through the service layer, 1 client, against raw INSERT + COMMIT
TARGET_INTENTS = 3.0  # new triggers of 16 intents: the intent lock against the former workflow lock
TARGET_CHECKPOINT_MIN = 0.20
TARGET_DECISION_P95_MS = 5.0
TARGET_DECISION_GROWTH = 1.5
TARGET_DECISION_GROWTH_AT_SCALE = 1.2  # --scale 10: 10M events against 1M (issue 30), decision and append
TARGET_HTTP_APPEND = 0.15  # a plain append through the HTTP API (as up serves it), 4 clients
TARGET_BATCH = 5.0
TARGET_DUPLICATE_P50 = 1.5  # a duplicate trigger's p50 against one client's GET /healthz p50, same run
TARGET_HTTP_P95 = 2.0  # one client's plain append p95 over HTTP against its GET /healthz p95, same run
LATENCY_SAMPLES = 300

FULL_EVENTS = 1_000_000
FULL_RUNS = 100_000


def run(*, out, scale: float = 1.0, skip_http: bool = False, skip_load: bool = False, keep: bool = False,
        db_name: str = "stateboard_bench", reps: int = 5, duration: float = 3.0, clients: int = 4) -> Report:
    say = Out(out)
    report = Report()
    debug_was = settings.DEBUG
    settings.DEBUG = False  # query logging would slow every service call
    t_start = time.perf_counter()
    try:
        with scratch_database(db_name, say, keep):
            with connection.cursor() as cur:
                cur.execute("SELECT version(), current_setting('synchronous_commit'), "
                            "current_setting('shared_buffers')")
                version, sync, buffers = cur.fetchone()
            say(f"PostgreSQL: {version.split(',')[0]}; synchronous_commit={sync}, shared_buffers={buffers}; "
                f"{os.cpu_count()} CPUs; scale={scale:g}, reps={reps}, {duration:g} s per measurement, "
                f"{clients} clients (processes, one connection each); load average {loadavg()}")
            with raw_table():
                appends.stream_workflow()
                agentpath.intents_workflow()
                _throughput(report, say, reps=reps, duration=duration, clients=clients)
                _triggers(report, say, reps=reps, duration=duration, clients=clients)
                if not skip_http:
                    _http(report, say, db_name=db_name, reps=reps, duration=duration, clients=clients)
                _statements(report, say)
            if not skip_load:
                _decisions(report, say, scale=scale, reps=reps, duration=duration)
    finally:
        settings.DEBUG = debug_was
    _summary(report, say, time.perf_counter() - t_start)
    return report


def _throughput(report: Report, say: Out, *, reps: int, duration: float, clients: int) -> None:
    say("")
    say(f"== event appends and checkpoints through the service layer ({reps} reps x {duration:g} s each) ==")
    say(f"   stream: each client drives its own runs through {len(STREAM_STAGES)} stages ({len(EFFECT_STAGES)} "
        f"effect stages): {CALLS_PER_RUN} event_append calls per run")
    series = {k: [] for k in ("raw1", "rawN", "svc1", "svcN", "plain1", "plainN", "cp1", "batchN")}
    guess1, guessN = 300.0, 200.0
    inline = 0
    for rep in range(1, reps + 1):
        m = {
            "raw1": measure_raw(1, duration),
            "rawN": measure_raw(clients, duration),
            "svc1": appends.measure_service_stream(1, duration, guess1),
            "svcN": appends.measure_service_stream(clients, duration, guessN),
            "plain1": appends.measure_service_plain(1, duration),
            "plainN": appends.measure_service_plain(clients, duration),
            "cp1": appends.measure_checkpoint(1, duration),
            "batchN": agentpath.measure_service_batch(clients, duration),
        }
        guess1, guessN = m["svc1"].rate, m["svcN"].rate / clients
        inline += m["svc1"].extra.get("inline_triggers", 0) + m["svcN"].extra.get("inline_triggers", 0)
        for key, value in m.items():
            series[key].append(value.rate)
        say(f"  rep {rep}: raw {m['raw1'].rate:,.0f}/s x1, {m['rawN'].rate:,.0f}/s x{clients} | "
            f"stream {m['svc1'].rate:,.0f}/s x1, {m['svcN'].rate:,.0f}/s x{clients} | "
            f"plain {m['plain1'].rate:,.0f}/s x1, {m['plainN'].rate:,.0f}/s x{clients} | "
            f"checkpoint save+load {m['cp1'].rate:,.0f}/s x1 | batch of {agentpath.BATCH_SIZE} "
            f"{m['batchN'].rate:,.0f} events/s x{clients}")
    if inline:
        say(f"  note: {inline} runs were triggered inside a timed window (pre-triggered runs ran out)")
    med = {k: median(v) for k, v in series.items()}
    report.figures.update({f"{k}_per_s": v for k, v in med.items()})
    for key, label, base_key, nclients in (("svc1", "append, service layer, stream", "raw1", 1),
                                           ("svcN", "append, service layer, stream", "rawN", clients),
                                           ("plain1", "append, service layer, plain (proposed)", "raw1", 1),
                                           ("plainN", "append, service layer, plain (proposed)", "rawN", clients)):
        share = ratio(med[key], med[base_key])
        report.figures[f"{key}_ratio"] = share
        targeted = key == "plain1"  # the stream's stage passes also write checkpoints: shown for scale
        report.add(Row(f"{label}, {nclients} client{'s' if nclients > 1 else ''}", rate(med[key]),
                       f"raw x{nclients} {rate(med[base_key])}", f"{share:.3f}x",
                       f">= {TARGET_APPEND:.2f}x" if targeted else "(info)",
                       verdict(share >= TARGET_APPEND) if targeted else ""))
    share = ratio(med["batchN"], med["plainN"])
    report.figures["batchN_ratio"] = share
    report.add(Row(f"append batch of {agentpath.BATCH_SIZE}, service layer, {clients} clients",
                   f"{rate(med['batchN'])} events", f"single plain x{clients} {rate(med['plainN'])}", f"{share:.2f}x",
                   "(info)", ""))
    share = ratio(med["cp1"], med["raw1"])
    report.figures["cp1_ratio"] = share
    report.add(Row("checkpoint save + load latest, 1 client", rate(med["cp1"]), f"raw x1 {rate(med['raw1'])}",
                   f"{share:.3f}x", f">= {TARGET_CHECKPOINT_MIN:.2f}x", verdict(share >= TARGET_CHECKPOINT_MIN)))
    say(f"  median: raw {med['raw1']:,.0f}/s x1, {med['rawN']:,.0f}/s x{clients}; stream {med['svc1']:,.0f}/s x1 "
        f"({ratio(med['svc1'], med['raw1']):.3f}x), {med['svcN']:,.0f}/s x{clients} "
        f"({ratio(med['svcN'], med['rawN']):.3f}x); plain {med['plain1']:,.0f}/s x1 "
        f"({ratio(med['plain1'], med['raw1']):.3f}x), {med['plainN']:,.0f}/s x{clients} "
        f"({ratio(med['plainN'], med['rawN']):.3f}x); checkpoint {med['cp1']:,.0f}/s "
        f"({ratio(med['cp1'], med['raw1']):.3f}x)")


def _http(report: Report, say: Out, *, db_name: str, reps: int, duration: float, clients: int) -> None:
    server = server_name()
    other = next(name for name in SERVERS if name != server)
    say("")
    say(f"== the HTTP API ({server} as `up` starts it, {clients} client processes, each on one keep-alive "
        "HTTP/1.1 connection to 127.0.0.1) ==")
    _, token = agent_create(name=f"bench-http-{uuid.uuid4().hex[:6]}")
    keys = ("rawN", "httpN", "hplainN", "hbatchN", "hfloorN", "hplain_nopoolN", "hplain_otherN")
    series = {k: [] for k in keys}
    client_cpu = {"rawN": [], "hplainN": []}
    guess = 100.0
    with appends.web_server(db_name, say, DB_POOL="1") as base:
        for rep in range(1, reps + 1):
            m = {"rawN": measure_raw(clients, duration),
                 "httpN": appends.measure_http_stream(base, token, clients, duration, guess),
                 "hplainN": appends.measure_http_plain(base, token, clients, duration),
                 "hbatchN": agentpath.measure_http_batch(base, token, clients, duration),
                 "hfloorN": appends.measure_http_floor(base, token, clients, duration)}
            guess = m["httpN"].rate / clients
            for key, value in m.items():
                series[key].append(value.rate)
            for key in client_cpu:
                client_cpu[key].append(m[key].client_cpu_ms)
            say(f"  rep {rep}: raw {m['rawN'].rate:,.0f}/s x{clients} | HTTP stream {m['httpN'].rate:,.0f}/s | "
                f"HTTP plain {m['hplainN'].rate:,.0f}/s | HTTP batch of {agentpath.BATCH_SIZE} "
                f"{m['hbatchN'].rate:,.0f} events/s | GET /healthz {m['hfloorN'].rate:,.0f}/s | clients' own CPU "
                f"per call: raw {m['rawN'].client_cpu_ms:.3f} ms, HTTP plain {m['hplainN'].client_cpu_ms:.3f} ms")
        latency = agentpath.measure_http_latency(base, token, LATENCY_SAMPLES)
        duplicate = agentpath.measure_duplicate_trigger(base, token, LATENCY_SAMPLES)
        health = agentpath.measure_health_latency(base, LATENCY_SAMPLES)
        say(f"  1 client, {LATENCY_SAMPLES} plain appends: p50 {latency['p50']:.2f} ms, p95 {latency['p95']:.2f} ms; "
            f"duplicate trigger p50 {duplicate['p50']:.2f} ms, p95 {duplicate['p95']:.2f} ms")
    for key, served_by, pool, label in (("hplain_nopoolN", server, "0", "pool off (CONN_MAX_AGE)"),
                                        ("hplain_otherN", other, "1", f"served by {other}")):
        with appends.web_server(db_name, say, served_by, DB_POOL=pool) as base:
            for rep in range(1, reps + 1):
                raw = measure_raw(clients, duration).rate
                series["rawN"].append(raw)
                series[key].append(appends.measure_http_plain(base, token, clients, duration).rate)
                say(f"  rep {rep}: raw {raw:,.0f}/s x{clients} | HTTP plain, {label} {series[key][-1]:,.0f}/s")
    med = {k: median(v) for k, v in series.items()}
    report.figures.update({f"{k}_per_s": v for k, v in med.items()})
    for key, label in (("httpN", "append, HTTP API, stream"), ("hplainN", "append, HTTP API, plain (proposed)"),
                       ("hplain_nopoolN", "append, HTTP API, plain, pool off (CONN_MAX_AGE=60)"),
                       ("hplain_otherN", f"append, HTTP API, plain, served by {other}")):
        share = ratio(med[key], med["rawN"])
        report.figures[f"{key}_ratio"] = share
        # The append is one event per call (the plain append); the stream, whose calls also pass
        # stages (a transition event each, a server checkpoint at a pass), is shown for scale, as in the
        # service layer; the other server is the web tier's comparison.
        target = key in ("hplainN", "hplain_nopoolN")
        report.add(Row(f"{label}, {clients} clients", rate(med[key]), f"raw x{clients} {rate(med['rawN'])}",
                       f"{share:.3f}x", f">= {TARGET_HTTP_APPEND:.2f}x" if target else "(info)",
                       verdict(share >= TARGET_HTTP_APPEND) if target else ""))
    raw_cpu, http_cpu = median(client_cpu["rawN"]), median(client_cpu["hplainN"])
    report.figures.update(raw_client_cpu_ms=raw_cpu, hplain_client_cpu_ms=http_cpu)
    report.add(Row("load generator: clients' own CPU per call (raw / HTTP plain)", f"{raw_cpu:.3f} / {http_cpu:.3f} ms",
                   "", "", "(info)", ""))
    share = ratio(med["hfloorN"], med["rawN"])
    report.figures["hfloorN_ratio"] = share
    report.add(Row(f"web tier floor: GET /healthz (SELECT 1 + Redis PING), {clients} clients", rate(med["hfloorN"]),
                   f"raw x{clients} {rate(med['rawN'])}", f"{share:.3f}x", "(info)", ""))
    share = ratio(med["hbatchN"], med["hplainN"])
    report.figures["hbatchN_ratio"] = share
    report.add(Row(f"append batch of {agentpath.BATCH_SIZE}, HTTP API, {clients} clients",
                   f"{rate(med['hbatchN'])} events", f"single plain x{clients} {rate(med['hplainN'])}",
                   f"{share:.2f}x", f">= {TARGET_BATCH:g}x", verdict(share >= TARGET_BATCH)))
    report.figures.update(http_p50_ms=latency["p50"], http_p95_ms=latency["p95"], health_p50_ms=health["p50"],
                          health_p95_ms=health["p95"], duplicate_p50_ms=duplicate["p50"], duplicate_p95_ms=duplicate["p95"])
    health_label = f"/healthz p50 / p95 {health['p50']:.2f} / {health['p95']:.2f} ms"
    share = ratio(latency["p95"], health["p95"])
    report.add(Row("append, HTTP API, plain, 1 client p50 / p95", f"{latency['p50']:.2f} / {latency['p95']:.2f} ms",
                   health_label, f"p95 {share:.2f}x", f"p95 <= {TARGET_HTTP_P95:g}x", verdict(share <= TARGET_HTTP_P95)))
    share = ratio(duplicate["p50"], health["p50"])
    report.add(Row("duplicate trigger, HTTP API, 1 client p50 / p95",
                   f"{duplicate['p50']:.2f} / {duplicate['p95']:.2f} ms", health_label, f"p50 {share:.2f}x",
                   f"p50 <= {TARGET_DUPLICATE_P50:g}x", verdict(share <= TARGET_DUPLICATE_P50)))


def _triggers(report: Report, say: Out, *, reps: int, duration: float, clients: int) -> None:
    say("")
    say(f"== new triggers of {agentpath.INTENTS} intents of one workflow, {clients} clients: the intent lock "
        "beside the former workflow lock ==")
    series = {"intent": [], "workflow": []}
    for rep in range(1, reps + 1):
        order = ("intent", "workflow") if rep % 2 else ("workflow", "intent")  # alternate: no order bias
        for key in order:
            series[key].append(agentpath.measure_intent_triggers(clients, duration,
                                                                 workflow_lock=key == "workflow").rate)
        say(f"  rep {rep}: intent lock {series['intent'][-1]:,.0f}/s | workflow lock {series['workflow'][-1]:,.0f}/s")
    med = {k: median(v) for k, v in series.items()}
    share = ratio(med["intent"], med["workflow"])
    report.figures.update(triggers_intent_per_s=med["intent"], triggers_workflow_per_s=med["workflow"],
                          triggers_ratio=share)
    report.add(Row(f"new triggers, {agentpath.INTENTS} intents of one workflow, {clients} clients",
                   rate(med["intent"]), f"workflow lock {rate(med['workflow'])}", f"{share:.2f}x",
                   f">= {TARGET_INTENTS:g}x", verdict(share >= TARGET_INTENTS)))


def _statements(report: Report, say: Out) -> None:
    say("")
    say("== SQL statements per request, and the round trips that carried them (Django test client in this process; "
        "BEGIN, COMMIT and savepoints not counted) ==")
    _, token = agent_create(name=f"bench-stmts-{uuid.uuid4().hex[:6]}")
    counts = agentpath.statements_per_request(token)
    for label, counted in counts.items():
        say(f"  {label}: {counted}")
        report.figures[f"statements {label}"] = len(counted.statements)
        report.figures[f"round trips {label}"] = counted.round_trips
        report.add(Row(f"statements: {label}", str(counted), "", "", "(info)", ""))


def _decisions(report: Report, say: Out, *, scale: float, reps: int, duration: float) -> None:
    say("")
    say("== recovery decision latency (read path: workflow + holding runs + recovery_input_gather + "
        "recovery_decide; full: run_trigger rolled back) ==")
    full_events = max(1000, int(FULL_EVENTS * scale))
    full_runs = max(100, int(FULL_RUNS * scale))
    tenfold = scale >= 10  # 10M events against 1M; below, the full load against 1 % of it
    small_events = max(200, full_events // (10 if tenfold else 100))
    small_runs = max(20, full_runs // (10 if tenfold else 100))
    growth_target = TARGET_DECISION_GROWTH_AT_SCALE if tenfold else TARGET_DECISION_GROWTH
    per_rep = max(50, min(300, int(300 * scale ** 0.25)))
    loader = LedgerHistory(say)
    loader.load(events_target=small_events, runs_target=small_runs, label="small")
    small_total = dict(loader.totals)
    small = decisions.measure_decisions(loader, reps, per_rep, seed=1)
    _say_latency(say, small_total, small, f"{reps} x {per_rep} decisions")
    small_append = _append_rate(say, reps, duration)
    say(f"loading ~{full_events:,} events / {full_runs:,} runs by COPY (progress every ~5 s) ...")
    loader.load(events_target=full_events - small_total["events"], runs_target=full_runs - small_total["runs"],
                label="full")
    big_total = dict(loader.totals)
    big = decisions.measure_decisions(loader, reps, per_rep, seed=2)
    _say_latency(say, big_total, big, f"{reps} x {per_rep} decisions")
    big_append = _append_rate(say, reps, duration)
    seq_scans = decisions.explain_decision(loader, say)
    growth = ratio(big["read_p95"], small["read_p95"])
    report.figures.update({
        "decision_small_events": small_total["events"], "decision_big_events": big_total["events"],
        "decision_small_p50_ms": small["read_p50"], "decision_small_p95_ms": small["read_p95"],
        "decision_big_p50_ms": big["read_p50"], "decision_big_p95_ms": big["read_p95"],
        "trigger_small_p95_ms": small["full_p95"], "trigger_big_p95_ms": big["full_p95"],
        "decision_growth": growth, "decision_seq_scans": seq_scans,
    })
    s_label, b_label = f"{small_total['events']:,}", f"{big_total['events']:,}"
    report.add(Row(f"recovery decision p50 / p95 at {s_label} events", f"{small['read_p50']:.2f} / "
                   f"{small['read_p95']:.2f} ms", "", "", "(reference)", ""))
    report.add(Row(f"recovery decision p50 / p95 at {b_label} events", f"{big['read_p50']:.2f} / "
                   f"{big['read_p95']:.2f} ms", f"p95 at {s_label}: {small['read_p95']:.2f} ms", f"{growth:.2f}x",
                   f"p95 <= {TARGET_DECISION_P95_MS:g} ms, <= {growth_target:g}x",
                   verdict(big["read_p95"] <= TARGET_DECISION_P95_MS and growth <= growth_target)))
    report.figures.update(append_small=small_append, append_big=big_append)
    report.add(Row(f"append, service layer, plain, 1 client, at {b_label} events", rate(big_append),
                   f"at {s_label}: {rate(small_append)}", f"{ratio(big_append, small_append):.2f}x",
                   f">= {1 / growth_target:.2f}x", verdict(ratio(big_append, small_append) >= 1 / growth_target)))
    report.add(Row(f"run_trigger (rolled back) p50 / p95 at {s_label}", f"{small['full_p50']:.2f} / "
                   f"{small['full_p95']:.2f} ms", "", "", "(info)", ""))
    report.add(Row(f"run_trigger (rolled back) p50 / p95 at {b_label}", f"{big['full_p50']:.2f} / "
                   f"{big['full_p95']:.2f} ms", "", f"{ratio(big['full_p95'], small['full_p95']):.2f}x", "(info)", ""))


APPEND_RATE_SECONDS = 2.0  # each measurement of the plain append's rate beside the loaded history (less if --duration is)


def _append_rate(say: Out, reps: int, duration: float) -> float:
    """A plain append's rate through the service layer, one client, with the ledger as loaded now."""
    appends.stream_workflow()
    rates = [appends.measure_service_plain(1, min(APPEND_RATE_SECONDS, duration)).rate for _ in range(max(1, reps))]
    say(f"  plain append, 1 client: {rate(median(rates))}")
    return median(rates)


def _say_latency(say: Out, totals: dict, m: dict, samples: str) -> None:
    say(f"  at {totals['events']:,} events / {totals['runs']:,} runs: read p50 {m['read_p50']:.2f} ms, "
        f"p95 {m['read_p95']:.2f} ms; full trigger p50 {m['full_p50']:.2f} ms, p95 {m['full_p95']:.2f} ms "
        f"({samples})")
    say(f"  outcomes: {dict(m['outcomes'].most_common())}")


def _summary(report: Report, say: Out, elapsed: float) -> None:
    say("")
    say(f"== summary (medians; ratio = value / baseline, both measured in this run; {elapsed:.0f} s; "
        f"load average at the end {loadavg()}) ==")
    for line in report.table():
        say(line)
