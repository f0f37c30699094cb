"""One simulated agent: the README's loop with ``stateboard.client``, over HTTP only (no Django here).

It honours the decision: stops on ``noop``/``escalated``, verifies only the listed effects in
``verify_only``, starts from the first stage not done, proposes on executor stages and asks an
editor before an approval stage. Faults are injected by the caller (``fail``/``unknown`` stages).
"""

from __future__ import annotations

import hashlib
import random
import time
from datetime import datetime, timezone

from stateboard.client import Client, Run

EXECUTOR = "system:executor"
WORKING = ("fresh", "resume", "verify_only")
SYSTEMS = {"commit": "git", "push": "git", "publish": "blog", "deploy": "k8s", "ticket": "jira", "advisory": "statuspage"}


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat()


def evidence(uri: str, excerpt: str) -> list[dict]:
    """One evidence item observed now (never before the run existed)."""
    return [{"uri": uri, "observed_at": now_iso(), "excerpt": excerpt,
             "digest": "sha256:" + hashlib.sha256(excerpt.encode()).hexdigest()}]


def stage_done(run: Run, stage: str) -> bool:
    status = ((run.raw.get("stage_states") or {}).get(stage) or {}).get("status")
    if run.is_effect_stage(stage):
        return status in ("verified", "skipped")
    return status in ("succeeded", "skipped", "verified")


def next_stage(run: Run) -> str | None:
    """The first stage not done (SPEC §3: the only one a run may start)."""
    return next((s for s in run.stages if not stage_done(run, s)), None)


def action_for(run: Run, stage: str) -> dict:
    return {"system": SYSTEMS.get(stage, "internal"), "operation": stage, "target": f"{run.workflow}/{run.intent}",
            "summary": f"{stage.replace('_', ' ').capitalize()} for {run.intent}"}


class Agent:
    """An agent identity with its client; ``editor`` is a colleague's client for approvals the demo settles."""

    def __init__(self, url: str, name: str, token: str, editor_token: str | None = None, pace: float = 0.0,
                 executors: dict[str, list[str]] | None = None):
        # ``executors`` is shown to owners only: the fleet tells its agents which stages Stateboard performs.
        self.name, self.actor, self.pace = name, f"agent:{name}", pace
        self.executors = executors or {}
        self.sb = Client(url, token, retries=4, backoff=0.2, timeout=30)
        self.editor = Client(url, editor_token, retries=4, backoff=0.2, timeout=30) if editor_token else None

    def close(self) -> None:
        self.sb.close()
        if self.editor:
            self.editor.close()

    def work(self) -> None:
        if self.pace:
            time.sleep(random.uniform(self.pace / 2, self.pace))

    # ------------------------------------------------------------ the loop

    def drive(self, run: Run, *, fail: tuple[str, str] | None = None, unknown: str | None = None) -> Run:
        """Drive ``run`` as far as it may go now; returns it refreshed (awaiting an editor, done, failed...)."""
        if run.outcome not in WORKING or run.staged:
            return run
        for effect in run.effects_to_verify():  # verify_only: check them, never execute them again
            if effect.get("status") != "verified" and effect.get("stage"):
                self.work()
                run.verify(effect["stage"], self.evidence_for(run, effect["stage"], effect.get("reference")))
        run.refresh()
        cite = self.facts_cited(run)  # cited once, by the first stage this drive completes
        executors = self.executors.get(run.workflow) or ()
        approval_stages = run.client.workflow(run.workflow).get("approval_stages") or []
        while run.state not in ("completed", "failed", "escalated", "abandoned", "noop"):
            stage = next_stage(run)
            if stage is None:
                break
            if run.lease and run.lease.get("owner") == EXECUTOR:
                return run  # the executor holds it (its task is queued or running)
            if stage in executors:
                run.event(stage, "proposed", action=action_for(run, stage))
                run.refresh()
                if run.state == "awaiting_approval":
                    return run  # the editor decides, then the executor performs it
                run = self.wait_executor(run)
                continue
            started = {}
            if stage in approval_stages:
                permit = self.permit(run, stage)
                if permit is None:
                    run.request_approval(stage, action_for(run, stage))
                    return run.refresh()
                started["action"] = permit["action"]
            if unknown == stage:
                run.event(stage, "started", **started)
                self.work()
                run.event(stage, "unknown", reason_code="deploy_timeout",
                          effect={"system": SYSTEMS.get(stage, "internal"), "operation": stage})
                return run.refresh()  # the agent dies here: nobody saw whether it happened
            with run.stage(stage, **started) as st:
                self.work()
                st.data = {"by": self.name}
                st.evidence, cite = cite or None, []
                if fail and fail[0] == stage:
                    st.failed(fail[1])
                    return run.refresh()
                if run.is_effect_stage(stage):
                    st.effect = {"system": SYSTEMS.get(stage, "internal"), "operation": stage,
                                 "reference": f"{stage}-{hashlib.sha256(run.id.encode()).hexdigest()[:8]}"}
            if run.is_effect_stage(stage):
                run.verify(stage, self.evidence_for(run, stage, st.effect["reference"]))
            run.refresh()
        return run

    def facts_cited(self, run: Run) -> list[dict]:
        """The facts the run's resume packet serves, as evidence ``claim:<key>@<version>``: what the agent
        worked from (SPEC §9), so the claims page shows which runs cited each claim."""
        facts = run.resume_packet().get("facts") or []
        return [{"uri": f"claim:{f['key']}@{f['version']}", "observed_at": now_iso(),
                 "excerpt": f"worked from {f['key']}"} for f in facts if f.get("key") and f.get("version")]

    def evidence_for(self, run: Run, stage: str, reference: str | None) -> list[dict]:
        host = SYSTEMS.get(stage, "internal")
        return evidence(f"https://{host}.example.com/{run.workflow}/{stage}/{reference or run.id}",
                        f"{stage} {reference or ''} confirmed for {run.intent}".strip())

    def permit(self, run: Run, stage: str) -> dict | None:
        """This run's approved, unused request for ``stage`` (the permit its ``started`` spends)."""
        for approval in run.client.get(f"/runs/{run.id}/").get("approvals") or ():
            if approval["stage"] == stage and approval["status"] == "approved" and not approval.get("consumed_at"):
                return approval
        return None

    def wait_executor(self, run: Run, timeout: float = 45.0) -> Run:
        """Wait until the executor hands the run back (or it ends); without a worker the fleet steps in."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            run.refresh()
            if not (run.lease and run.lease.get("owner") == EXECUTOR) or run.state in ("completed", "escalated", "failed"):
                return run
            time.sleep(0.3)
        return run

    # ------------------------------------------------------------ colleagues

    def approve(self, run: Run, stage: str, reason: str = "Checked the draft and the sources.") -> dict | None:
        """The demo's editor approves the pending request of ``run`` (as a human would in /approvals/)."""
        for approval in run.client.get(f"/runs/{run.id}/").get("approvals") or ():
            if approval["stage"] == stage and approval["status"] == "pending":
                return self.editor.post(f"/approvals/{approval['id']}/approve/", {"reason": reason})
        return None

    def tend(self, limit: int = 5, wait_seconds: float = 0) -> list[Run]:
        """Living fleet: lease queued runs (schedule ticks, on-call retries; the first lease waits up to
        ``wait_seconds`` for one) and go on with own runs that a human approved meanwhile or the executor
        handed back."""
        touched = []
        for _ in range(limit):
            run = self.sb.lease(wait_seconds=0 if touched else wait_seconds)
            if run is None:
                break
            touched.append(self.drive(run))
        for state in ("awaiting_approval", "checkpointed"):
            for body in self.sb.get("/runs/", state=state).get("results", [])[:20]:
                if (body.get("lease") or {}).get("owner") != self.actor:
                    continue
                run = self.sb.run(body["id"])
                if state == "awaiting_approval" and not self.permit(run, run.current_stage):
                    continue
                touched.append(self.drive(run))
        return touched
