"""The field's faults, one scenario each, played by an agent against the running server (HTTP only).

A scenario returns records ``{scenario, fault?, workflow, intent, run, outcome, reason}``; ``fault`` names
the promised fault the record proves. ``PROMISED`` is what one ``--once`` pass must produce.
"""

from __future__ import annotations

import time

from ledger.ops.demo.agent import Agent
from ledger.ops.demo.claims import ABSENT_KEYS, STALE_KEYS
from stateboard.client import Run

PROMISED = {
    "duplicate_trigger": "the same trigger_key twice is the same run",
    "active_run_exists": "a second trigger while a run of the intent is active is a noop",
    "retrigger_after_publish": "a trigger after a verified publish is a noop",
    "executor_effect": "the executor performed the approved publish (record handler)",
    "deploy_timeout_verify_only": "a deploy that timed out after the push: verify_only, verified, not re-executed",
    "failed_page_check": "a page check failed (the run failed) and the next trigger resumed at it",
    "changed_source": "a changed source is a fresh run (input_changed)",
    "build_keeps_failing": "a build that keeps failing escalates (retry_budget_exhausted) to on-call",
    "env_change": "a new environment resumes with the done stages downgraded (env_changed_downgraded)",
    "stale_claim_lead": "a stale claim is in the resume packet as a lead, not a fact",
    "revoked_claim_absent": "revoked and pending claims are not in the resume packet",
    "approval_waiting": "a high-impact approval waits for an editor",
}


def note(scenario: str, run: Run, fault: str | None = None, **extra) -> dict:
    return {"scenario": scenario, "fault": fault, "workflow": run.workflow, "intent": run.intent, "run": run.id,
            "outcome": run.outcome, "reason": run.decision.get("reason_code", ""), **extra}


def when(proved, fault: str) -> str | None:
    return fault if proved else None


def _key(tag: str, name: str) -> str:
    return f"demo:{tag}:{name}"


def publish(agent: Agent, tag: str) -> list[dict]:
    """research-publish: a duplicate trigger, a second trigger while waiting, an editor's approval, the
    executor's publish, a re-trigger after it (noop), then a changed source (fresh) left for the editor."""
    sb, out, intent = agent.sb, [], f"post/{tag}"
    inputs = {"sources": f"feeds@{tag}", "draft": "v1"}
    run = sb.trigger("research-publish", inputs, intent=intent, trigger_key=_key(tag, "post"))
    again = sb.trigger("research-publish", inputs, intent=intent, trigger_key=_key(tag, "post"))
    out.append(note("publish", again, "duplicate_trigger" if again.duplicate and again.id == run.id else None,
                    detail="same trigger_key answered the same run"))
    run.resume_packet()  # what the agent reads instead of chat history
    agent.drive(run)  # ... publish proposed: waiting for the editor
    rival = sb.trigger("research-publish", inputs, intent=intent, trigger_key=_key(tag, "post-rival"))
    out.append(note("publish", rival, when(rival.decision.get("reason_code") == "active_run_exists",
                                                "active_run_exists")))
    agent.approve(run, "publish")
    run = agent.wait_executor(run.refresh())
    published = [e for e in sb.effects(run=run.id) if e["stage"] == "publish" and e["status"] == "verified"]
    by_executor = any(e["actor"] == "system:executor" and e["kind"] == "verified"
                      for e in sb.get_all(f"/runs/{run.id}/events/") if e["stage"] == "publish")
    run = agent.drive(run)
    out.append(note("publish", run, "executor_effect" if published and by_executor else None,
                    detail="publish performed by system:executor"))
    repeat = sb.trigger("research-publish", inputs, intent=intent, trigger_key=_key(tag, "post-repeat"))
    out.append(note("publish", repeat, "retrigger_after_publish"
                    if repeat.decision.get("reason_code") == "verified_effect_same_fingerprint" else None))
    changed = sb.trigger("research-publish", {**inputs, "draft": "v2"}, intent=intent,
                         trigger_key=_key(tag, "post-v2"))
    out.append(note("publish", changed, when(changed.decision.get("reason_code") == "input_changed",
                                                    "changed_source")))
    changed = agent.drive(changed)
    out.append(note("publish", changed, "approval_waiting" if changed.state == "awaiting_approval" else None,
                    detail="left for the editor in /approvals/"))
    return out


def page_check_fails(agent: Agent, tag: str) -> list[dict]:
    """research-publish: published, then the page check fails; the next trigger resumes at the check."""
    sb, intent = agent.sb, f"post/{tag}/errata"
    inputs = {"sources": f"feeds@{tag}", "draft": "errata-v1"}
    run = agent.drive(sb.trigger("research-publish", inputs, intent=intent, trigger_key=_key(tag, "errata")))
    agent.approve(run, "publish", reason="Errata are fine to publish.")
    run = agent.drive(agent.wait_executor(run.refresh()), fail=("page_check", "page_not_found"))
    out = [note("page_check_fails", run, "failed_page_check" if run.state == "failed" else None, detail="404 on the page")]
    retry = sb.trigger("research-publish", inputs, intent=intent, trigger_key=_key(tag, "errata-2"))
    resumed_at = retry.decision.get("resume_from")
    out.append(note("page_check_fails", agent.drive(retry), None, detail=f"resumed at {resumed_at}"))
    return out


def deploy_timeout(agent: Agent, tag: str) -> list[dict]:
    """ci-triage: the push succeeded, the deploy timed out and the agent died; once its lease ran out the
    next trigger may only verify the deploy, then goes on from resume_from."""
    sb, intent = agent.sb, f"pipeline/{tag}/main"
    inputs = {"failure": f"build-{tag}", "commit": "9f2c1e0"}
    run = agent.drive(sb.trigger("ci-triage", inputs, intent=intent, trigger_key=_key(tag, "main")), unknown="deploy")
    lease = sb.workflow("ci-triage")["lease_seconds"]
    time.sleep(lease + 1)  # nobody posts: the lease runs out
    again = sb.trigger("ci-triage", inputs, intent=intent, trigger_key=_key(tag, "main-2"))
    listed = list(again.decision.get("verify_effects") or [])
    again = agent.drive(again)
    started = [e for e in sb.get_all(f"/runs/{again.id}/events/") if e["stage"] == "deploy" and e["kind"] == "started"]
    ok = again.outcome == "verify_only" and listed and not started and again.state == "completed"
    return [note("deploy_timeout", run, None, detail="deploy unknown: agent died"),
            note("deploy_timeout", again, "deploy_timeout_verify_only" if ok else None,
                 detail=f"verified {len(listed)} effect(s) without re-executing")]


def build_keeps_failing(agent: Agent, tag: str) -> list[dict]:
    """ci-triage: the build fails on every attempt until the retry budget is spent: an escalation."""
    sb, intent, out = agent.sb, f"pipeline/{tag}/nightly", []
    inputs = {"failure": f"nightly-{tag}", "commit": "77ab310"}
    for attempt in range(sb.workflow("ci-triage")["max_retries"] + 1):
        run = sb.trigger("ci-triage", inputs, intent=intent, trigger_key=_key(tag, f"nightly-{attempt}"))
        if run.outcome == "escalated":
            out.append(note("build_keeps_failing", run,
                            "build_keeps_failing" if run.decision.get("reason_code") == "retry_budget_exhausted" else None,
                            detail="waiting for on-call in /oncall/"))
            break
        out.append(note("build_keeps_failing", agent.drive(run, fail=("build", "tests_red")), None,
                        detail=f"attempt {attempt + 1}: build red"))
    pending = sb.trigger("ci-triage", inputs, intent=intent, trigger_key=_key(tag, "nightly-again"))
    out.append(note("build_keeps_failing", pending, None, detail="one escalation per problem"))
    return out


def env_change(agent: Agent, tag: str) -> list[dict]:
    """ci-triage: the runner is evicted mid-way; the retry runs on a new image, so the stages done on the
    old one go back to pending (env_changed_downgraded)."""
    sb, intent = agent.sb, f"pipeline/{tag}/release"
    inputs = {"failure": f"release-{tag}", "commit": "c0ffee1"}
    old = sb.trigger("ci-triage", inputs, intent=intent, trigger_key=_key(tag, "release"),
                     env_fingerprint="runner:2026.11 python:3.11 node:20")
    old = agent.drive(old, fail=("patch", "runner_evicted"))
    new = sb.trigger("ci-triage", inputs, intent=intent, trigger_key=_key(tag, "release-2"),
                     env_fingerprint="runner:2026.12 python:3.12 node:22")
    reason = new.decision.get("reason_code")
    new = agent.drive(new)
    return [note("env_change", old, None, detail="runner evicted during patch"),
            note("env_change", new, when(new.outcome == "resume" and reason == "env_changed_downgraded", "env_change"),
                 detail=f"resume_from {new.decision.get('resume_from')}")]


def security_finding(agent: Agent, tag: str) -> list[dict]:
    """security-triage: the resume packet serves the stale claim as a lead and leaves out the revoked and
    the pending one; the ticket is filed and the advisory waits for an editor."""
    sb, intent = agent.sb, f"finding/{tag}/CVE-2026-4417"
    run = sb.trigger("security-triage", {"finding": "CVE-2026-4417", "scanner": f"scan@{tag}"}, intent=intent,
                     trigger_key=_key(tag, "finding"))
    packet = run.resume_packet()
    facts, leads = {f["key"] for f in packet["facts"]}, {lead["key"] for lead in packet["leads"]}
    out = [note("security_finding", run, "stale_claim_lead" if STALE_KEYS & leads and not STALE_KEYS & facts else None,
                detail=f"{len(facts)} facts, {len(leads)} leads"),
           note("security_finding", run, "revoked_claim_absent" if not ABSENT_KEYS & (facts | leads) else None)]
    run = agent.drive(run)
    out.append(note("security_finding", run, "approval_waiting" if run.state == "awaiting_approval" else None,
                    detail="advisory waits for an editor"))
    return out


def tend(agent: Agent, tag: str) -> list[dict]:
    """Living fleet: queued runs (schedule ticks, on-call retries) and runs a human approved meanwhile."""
    return [note("tend", run, None, detail=run.state) for run in agent.tend()]


SCENARIOS = {fn.__name__: fn for fn in (publish, deploy_timeout, page_check_fails, build_keeps_failing,
                                        env_change, security_finding)}
