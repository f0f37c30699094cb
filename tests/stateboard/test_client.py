"""stateboard.client against a live server: runs, crashes, lost answers and errors."""

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from decimal import Decimal
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from stateboard.client import Client, StateboardError, StateboardUnavailable
from tests.factories import make_agent, make_operator, make_workflow
from tests.knowledge.conftest import proposal
from tests.stateboard.client_support import CRASH_INPUTS, EVIDENCE, FaultyProxy, agent_loop, effect_for, fault_once

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
STAGES = ["discovery", "draft", "push", "announce"]


def small_workflow(**fields):
    return make_workflow(stages=STAGES, effect_stages=["push"], approval_stages=[], **fields)


@pytest.fixture
def token():
    return make_agent()[1]


@pytest.fixture
def sb(live_server, token):
    with Client(live_server.url, token, retries=2, backoff=0.05) as client:
        yield client


def upstream(live_server) -> tuple[str, int]:
    parts = urlsplit(live_server.url)
    return parts.hostname, parts.port


@pytest.fixture
def proxy_for(live_server):
    proxies = []

    def make(fault=None) -> FaultyProxy:
        proxies.append(FaultyProxy(upstream(live_server), fault))
        return proxies[-1]

    yield make
    for proxy in proxies:
        proxy.close()


def events_of(sb: Client, run_id: str) -> list[dict]:
    return sb.get_all(f"/runs/{run_id}/events/")


# ---------------------------------------------------------------- a whole run

def test_client_runs_a_workflow_to_completed(sb):
    """Plain and effect stages through run.stage(...), the effect verified, end completed; a re-trigger is noop."""
    wf = small_workflow()
    run = sb.trigger(wf.slug, {"source": "v1"}, trigger_key="k-1")
    assert (run.state, run.outcome, run.duplicate) == ("fresh", "fresh", False)
    assert run.stages_from() == STAGES
    agent_loop(run)
    assert run.state == "completed"
    kinds = [(e["stage"], e["kind"]) for e in events_of(sb, run.id) if e["kind"] not in ("transition", "decided", "leased")]
    assert kinds == [("discovery", "started"), ("discovery", "succeeded"), ("draft", "started"),
                     ("draft", "succeeded"), ("push", "started"), ("push", "succeeded"), ("push", "verified"),
                     ("announce", "started"), ("announce", "succeeded")]
    assert [e["status"] for e in sb.effects(run=run.id)] == ["verified"]
    assert sb.get(f"/runs/{run.id}/verify-chain/")["ok"] is True
    same = sb.trigger(wf.slug, {"source": "v1"}, trigger_key="k-1")
    assert (same.id, same.duplicate) == (run.id, True)
    again = sb.trigger(wf.slug, {"source": "v1"})
    assert again.decision["outcome"] == "noop" and not again.duplicate


def test_client_stage_exception_fails_a_plain_stage(sb):
    """An exception in a plain stage posts failed (run failed) and is re-raised."""
    run = sb.trigger(small_workflow().slug, {"v": 1})
    with pytest.raises(ZeroDivisionError):
        with run.stage("discovery"):
            1 / 0
    last = events_of(sb, run.id)
    failed = [e for e in last if e["kind"] == "failed"]
    assert len(failed) == 1 and failed[0]["data"]["exception"] == "ZeroDivisionError"
    assert run.refresh().state == "failed"


def test_client_stage_exception_on_effect_stage_is_unknown(sb):
    """An exception in an effect stage posts unknown (never failed): the run must verify it."""
    run = sb.trigger(small_workflow().slug, {"v": 2})
    for stage in ("discovery", "draft"):
        with run.stage(stage):
            pass
    with pytest.raises(TimeoutError):
        with run.stage("push") as st:
            st.effect = effect_for("push")
            raise TimeoutError("the remote did not answer")
    assert run.refresh().state == "verify"
    assert [e["status"] for e in sb.effects(run=run.id)] == ["unknown"]
    run.verify("push", EVIDENCE)
    assert run.refresh().state == "checkpointed"


def test_client_handle_failed_and_skip(sb):
    """handle.skip() posts skipped; handle.failed(code) posts failed with that code and no succeeded."""
    run = sb.trigger(small_workflow().slug, {"v": 3})
    with run.stage("discovery") as st:
        st.skip()
    with run.stage("draft") as st:
        st.failed("source_missing")
    kinds = [(e["stage"], e["kind"], e["reason_code"]) for e in events_of(sb, run.id)
             if e["kind"] in ("started", "succeeded", "skipped", "failed")]
    assert kinds == [("discovery", "started", ""), ("discovery", "skipped", ""), ("draft", "started", ""),
                     ("draft", "failed", "source_missing")]
    assert run.refresh().state == "failed"


def test_client_batch_events_are_appended_in_order(sb):
    """run.events([...]) appends in order (as a batch, or one by one on a server without batches)."""
    run = sb.trigger(small_workflow().slug, {"v": 4})
    posted = run.events([{"stage": "discovery", "kind": "started"},
                         {"stage": "discovery", "kind": "succeeded", "data": {"n": 1}},
                         {"stage": "draft", "kind": "started"}])
    assert [(e["stage"], e["kind"]) for e in posted] == [("discovery", "started"), ("discovery", "succeeded"),
                                                         ("draft", "started")]
    assert [e["seq"] for e in posted] == sorted(e["seq"] for e in posted)
    assert run.refresh().state == "execute" and run.current_stage == "draft"


def test_client_wait_times_out(sb):
    """wait() raises TimeoutError when the state never comes."""
    run = sb.trigger(small_workflow().slug, {"v": 5})
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        run.wait("completed", timeout=0.3, interval=0.1)
    assert time.monotonic() - started < 3
    assert run.wait(["fresh", "completed"], timeout=1).state == "fresh"


# ---------------------------------------------------------------- crash and resume

def _read_lines(stream, lines: queue.Queue) -> None:
    for line in stream:
        lines.put(line.strip())


@pytest.mark.slow  # an agent process killed, then a real lease running out
@pytest.mark.parametrize("crash_stage,outcome,resume_from", [
    ("draft", "resume", "draft"), ("push", "verify_only", "announce")])
def test_client_agent_killed_mid_stage_is_resumed(live_server, sb, token, crash_stage, outcome, resume_from):
    """A SIGKILLed agent leaves the run in execute; after the lease the re-trigger resumes it to completed."""
    wf = small_workflow(lease_seconds=1)
    agent = subprocess.Popen([sys.executable, "-m", "tests.stateboard.client_support", live_server.url, token, wf.slug,
                              crash_stage], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=_read_lines, args=(agent.stdout, lines), daemon=True).start()
    try:
        run_id = lines.get(timeout=30).split()[1]
        assert lines.get(timeout=30) == f"in {crash_stage}"
    finally:
        agent.send_signal(signal.SIGKILL)
        agent.wait(timeout=10)
    crashed = sb.run(run_id)
    assert (crashed.state, crashed.current_stage) == ("execute", crash_stage)
    time.sleep(1.2)  # the lease runs out
    run = sb.trigger(wf.slug, CRASH_INPUTS, intent="crash")
    assert (run.outcome, run.decision["resume_from"]) == (outcome, resume_from)
    assert run.decision["prior_run"] == run_id
    assert sb.run(run_id).state == "failed"
    if outcome == "verify_only":
        assert [e["stage"] for e in run.effects_to_verify()] == ["push"]
    agent_loop(run)
    assert run.state == "completed"
    started = [e["stage"] for e in events_of(sb, run.id) if e["kind"] == "started"]
    assert started == STAGES[STAGES.index(resume_from):]
    assert [e["status"] for e in sb.effects(workflow=wf.slug)] == ["verified"]


# ---------------------------------------------------------------- lost answers and errors

def test_client_event_with_lost_answer_is_recorded_once(live_server, token, proxy_for):
    """The first answer to POST /events/ is dropped; the client resends it and the ledger holds it once."""
    proxy = proxy_for(fault_once("drop", "POST", "/events/"))
    with Client(proxy.url, token, retries=2, backoff=0.05) as sb:
        run = sb.trigger(small_workflow().slug, {"v": 6})
        event = run.event("discovery", "started")
        cid = event["client_event_id"]
        recorded = [e for e in events_of(sb, run.id) if e["client_event_id"] == cid]
    events_posts = [what for method, path, what in proxy.seen if path.endswith("/events/") and method == "POST"]
    assert events_posts == ["drop", "forwarded"]
    assert len(recorded) == 1 and recorded[0]["seq"] == event["seq"]


def test_client_retries_a_503_and_never_a_4xx(live_server, token, proxy_for):
    """A 503 is resent (event recorded once); a 409 raises StateboardError after one request."""
    proxy = proxy_for(fault_once("503", "POST", "/events/"))
    with Client(proxy.url, token, retries=2, backoff=0.05) as sb:
        run = sb.trigger(small_workflow().slug, {"v": 7})
        run.event("discovery", "started")
        with pytest.raises(StateboardError) as refused:
            run.event("push", "started")  # out of order: draft comes first
    assert refused.value.status == 409 and refused.value.code == "illegal_transition"
    assert refused.value.body["state"] == "execute" and refused.value.detail
    posts = [what for method, path, what in proxy.seen if path.endswith("/events/") and method == "POST"]
    assert posts == ["503", "forwarded", "forwarded"]
    assert [e["kind"] for e in events_of(Client(live_server.url, token), run.id)].count("started") == 1


def test_client_unreachable_server_raises_stateboard_unavailable(token):
    """With no server listening the client gives up after its retries with status 0, code unreachable."""
    with Client("http://127.0.0.1:9", token, retries=1, backoff=0.01, timeout=1) as sb:
        with pytest.raises(StateboardUnavailable) as gone:
            sb.run("00000000-0000-0000-0000-000000000000")
    assert (gone.value.status, gone.value.code) == (0, "unreachable")


def test_client_unknown_run_is_a_404_error(sb):
    """A missing run raises StateboardError 404 run_not_found."""
    with pytest.raises(StateboardError) as missing:
        sb.run("00000000-0000-0000-0000-000000000000")
    assert (missing.value.status, missing.value.code) == (404, "run_not_found")


# ---------------------------------------------------------------- endpoints built in parallel

def test_client_leases_a_queued_run(live_server, sb):
    """A run a human triggered is queued; lease() hands it to the agent once, then answers None."""
    wf = small_workflow()
    _, human = make_operator("owner")
    with Client(live_server.url, human) as owner:
        queued = owner.trigger(wf.slug, {"v": 8})
    leased = sb.lease([wf.slug])
    assert leased is not None and leased.id == queued.id and leased.lease
    assert sb.lease([wf.slug]) is None
    agent_loop(leased)
    assert leased.state == "completed"


def test_client_goal_versions(sb):
    """goal() makes version 1 and an amend version 2."""
    wf = small_workflow()
    first = sb.goal(wf.slug, "post-1", objective="Publish", acceptance=["cites"])
    second = sb.goal(wf.slug, "post-1", constraints=["no paywalls"])
    assert (first["version"], second["version"]) == (1, 2)


def test_client_resume_packet(sb):
    """resume_packet() reads the decision and the stages within the budget."""
    run = sb.trigger(small_workflow().slug, {"v": 9})
    packet = run.resume_packet(budget_tokens=2000)
    assert packet["decision"]["outcome"] == "fresh" and packet["approx_tokens"] <= 2000
    assert [s["stage"] for s in packet["stages"]] == STAGES


def test_client_notifications(sb):
    """notifications() lists the caller's notifications (none for a new agent)."""
    assert sb.notifications() == []


def test_client_claims_propose_and_list(sb):
    """propose_claim() goes through the write gate; a refusal is a 422 StateboardError with reasons."""
    with pytest.raises(StateboardError) as refused:
        sb.propose_claim(key="k.no-sources", statement="Nothing backs this.")
    assert refused.value.status == 422 and refused.value.code == "write_gate_rejected"
    assert refused.value.body["reasons"]
    assert sb.claims(key="k.no-sources") == []
    claim = sb.propose_claim(**proposal())
    assert claim["status"] == "active"
    listed = sb.claims(system="billing", key=claim["key"])
    assert [(c["key"], c["use_as"]) for c in listed] == [(claim["key"], "fact")]


def test_client_sends_usage_money_as_decimals_and_reads_the_totals(sb):
    """SPEC §16: ``handle.usage`` goes with the stage's closing event, a Decimal cost as its decimal string; the
    run's totals come back with a Decimal cost, and a token count as a string is refused."""
    run = sb.trigger(small_workflow().slug, {"v": 1})
    with run.stage("discovery") as handle:
        handle.usage = {"input_tokens": 10, "output_tokens": 2, "cost_usd": Decimal("0.1"), "model": "m-1"}
    run.event("draft", "started", usage={"cost_usd": Decimal("0.2")})
    assert handle.outcome["usage"] == {"input_tokens": 10, "output_tokens": 2, "cost_usd": "0.1", "model": "m-1"}
    assert run.refresh().usage == {"input_tokens": 10, "output_tokens": 2, "cost_usd": Decimal("0.3")}
    with pytest.raises(StateboardError) as refused:
        run.event("draft", "succeeded", usage={"input_tokens": "12"})
    assert (refused.value.status, refused.value.code) == (422, "invalid_usage")
