"""``python manage.py bench agents``: the agent's side end to end. It prints figures, it asserts nothing.

In the scratch database (made by the dispatcher), with the web server started as ``manage.py up`` starts it
(``appends.web_server``):

- full runs through the Python client (``stateboard.client``): each of ``clients`` processes triggers a
  run of the 20-stage stream workflow (3 effect stages) and drives it to ``completed`` (``run.stage``
  on every stage, ``run.verify`` after each effect stage: 43 events), in runs/s, beside the raw
  single-event HTTP append (``requests`` posting one ``proposed`` event at a time) measured in the
  same run, expressed as runs/s at 43 events a run;
- the resume packet p50 / p95 with ``scale`` x 10,000 live claims in the workflow's
  ``knowledge_scope`` (``loader.claims_load``): ``ledger.resume.resume_packet`` in this process and
  ``GET /api/v1/runs/{id}/resume-packet/`` over HTTP.
"""

from __future__ import annotations

import logging
import random
import time
import uuid

from django.conf import settings
from django.utils import timezone

from knowledge.models import Claim, ClaimHead
from ledger import services
from ledger.identities import agent_create, operator_create
from ledger.models import Run
from ledger.ops.bench import appends
from ledger.ops.bench.appends import CALLS_PER_RUN, EFFECT_STAGES, STREAM_STAGES
from ledger.ops.bench.common import Out, Report, Row, loadavg, median, percentile, rate, ratio, run_clients
from ledger.ops.bench.loader import analyze, claim_heads_build, claims_load
from ledger.resume import resume_packet
from stateboard.client import Client

RESUME_WORKFLOW = "bench-resume"
RESUME_SYSTEM = "bench-resume"
FULL_CLAIMS = 10_000
PACKET_SAMPLES = 100


def _client_run(sb) -> None:
    """One run through the Python client: triggered, every stage passed, effects verified."""
    run = sb.trigger(appends.STREAM_WORKFLOW, {"item": uuid.uuid4().hex}, intent=f"agents/{uuid.uuid4().hex[:12]}",
                     env_fingerprint="img:1")
    assert run.outcome == "fresh", run.decision
    for stage in STREAM_STAGES:
        with run.stage(stage) as st:
            if stage in EFFECT_STAGES:
                st.effect = {"system": "git", "operation": stage, "reference": uuid.uuid4().hex}
            else:
                st.data = {"summary": f"{stage} done"}
        if stage in EFFECT_STAGES:
            run.verify(stage, [{"uri": f"https://ci.example/{stage}/{run.id}",
                                "observed_at": timezone.now().isoformat()}], effect=st.effect)
    assert run.refresh().state == "completed", run.state


def measure_client_runs(base: str, token: str, clients: int, duration: float):
    def prepare(i):
        sb = Client(base, token, timeout=30)
        sb.workflow(appends.STREAM_WORKFLOW)  # the client caches the definition, as a long-lived agent does
        return sb

    return run_clients(clients, prepare, _client_run, duration, lambda sb: sb.close())


def _resume_setup(scale: float, say: Out):
    """The workflow with its knowledge scope, the claims in it, and one run of it (leased to the agent)."""
    n_keys = max(20, int(FULL_CLAIMS * scale))
    started = time.perf_counter()
    loaded = claims_load(system=RESUME_SYSTEM, prefix="bench.resume/", n_keys=n_keys, rng=random.Random(7),
                         now=timezone.now())
    heads = claim_heads_build(system=RESUME_SYSTEM)

    analyze(Claim, ClaimHead)
    say(f"  loaded {heads:,} claim keys ({loaded.versions:,} versions, {len(loaded.live_keys):,} live) in "
        f"scope {RESUME_SYSTEM}/bench in {time.perf_counter() - started:.1f} s")
    owner, _ = operator_create(name=f"bench-owner-{uuid.uuid4().hex[:6]}", role="owner")
    services.workflow_create(user=owner, data={
        "slug": RESUME_WORKFLOW, "title": "Bench resume", "stages": list(STREAM_STAGES),
        "effect_stages": list(EFFECT_STAGES), "approval_stages": [], "lease_seconds": 3600,
        "knowledge_scope": {"system": RESUME_SYSTEM, "task": "bench"}})
    return len(loaded.live_keys)


def measure_resume(base: str, token: str, user, samples: int) -> dict:
    """p50 / p95 (ms) of the packet in this process and over HTTP, for one run of the scoped workflow."""
    import requests  # (c) a test extra, not a product dependency

    run, _ = services.run_trigger(workflow_slug=RESUME_WORKFLOW, inputs={"item": 1}, intent="resume/1",
                                  env_fingerprint="img:1", actor=f"agent:{user.username}")
    run = Run.objects.select_related("workflow").get(id=run.id)
    packet = resume_packet(run=run, user=user)
    local = []
    for _ in range(samples):
        started = time.perf_counter()
        resume_packet(run=Run.objects.select_related("workflow").get(id=run.id), user=user)
        local.append((time.perf_counter() - started) * 1000)
    session = requests.Session()
    session.headers["Authorization"] = f"Token {token}"
    url = f"{base}/api/v1/runs/{run.id}/resume-packet/"
    remote = []
    try:
        for n in range(samples + 1):
            started = time.perf_counter()
            response = session.get(url, timeout=30)
            if n:  # the first warms the worker
                remote.append((time.perf_counter() - started) * 1000)
            assert response.status_code == 200, (response.status_code, response.text[:300])
    finally:
        session.close()
    return {"local_p50": percentile(local, 0.5), "local_p95": percentile(local, 0.95),
            "http_p50": percentile(remote, 0.5), "http_p95": percentile(remote, 0.95),
            "facts": len(packet["facts"]), "leads": len(packet["leads"]), "omitted": packet["omitted"]}


def run(*, out, scale: float = 1.0, reps: int = 3, duration: float = 5.0, clients: int = 4,
        db_name: str = "stateboard_bench") -> Report:
    say = Out(out)
    report = Report()
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per request otherwise
    debug_was = settings.DEBUG
    settings.DEBUG = False
    t_start = time.perf_counter()
    try:
        appends.stream_workflow()
        agent, token = agent_create(name=f"bench-agents-{uuid.uuid4().hex[:6]}")
        say(f"agents bench: scale {scale:g}; {reps} reps x {duration:g} s, {clients} client processes; "
            f"{CALLS_PER_RUN} events a run; load average {loadavg()}")
        live = _resume_setup(scale, say)
        samples = max(20, min(PACKET_SAMPLES, int(PACKET_SAMPLES * scale ** 0.5)))
        series = {"raw": [], "client": []}
        with appends.web_server(db_name, say, DB_POOL="1") as base:
            for rep in range(1, reps + 1):
                raw = appends.measure_http_plain(base, token, clients, duration)
                full = measure_client_runs(base, token, clients, duration)
                series["raw"].append(raw.rate)
                series["client"].append(full.rate)
                say(f"  rep {rep}: raw HTTP append {raw.rate:,.0f} events/s x{clients} | Python client "
                    f"{full.rate:,.2f} runs/s x{clients} ({full.ops} runs)")
            packet = measure_resume(base, token, agent.user, samples)
    finally:
        settings.DEBUG = debug_was
    raw_rate, client_rate = median(series["raw"]), median(series["client"])
    raw_runs = raw_rate / CALLS_PER_RUN
    share = ratio(client_rate, raw_runs)
    report.figures.update(client_runs_per_s=client_rate, raw_events_per_s=raw_rate, client_ratio=share, **packet)
    report.add(Row(f"full run, Python client over HTTP, {clients} clients", f"{client_rate:,.2f} runs/s",
                   f"raw append x{clients} {rate(raw_rate)} = {raw_runs:,.2f} runs/s", f"{share:.2f}x", "(info)", ""))
    scope = f"{live:,} live claims in scope"
    report.add(Row(f"resume packet in-process, {scope}", f"{packet['local_p50']:.1f} / {packet['local_p95']:.1f} ms",
                   "", "", "(info)", ""))
    report.add(Row(f"resume packet GET over HTTP, {scope}", f"{packet['http_p50']:.1f} / {packet['http_p95']:.1f} ms",
                   "", "", "(info)", ""))
    say(f"  packet (2,000 tokens): {packet['facts']} facts, {packet['leads']} leads, omitted {packet['omitted']}")
    say("")
    say(f"== summary (medians of {reps} reps; latencies p50 / p95 of {samples}; "
        f"{time.perf_counter() - t_start:.0f} s; load average {loadavg()}) ==")
    for line in report.table():
        say(line)
    return report
