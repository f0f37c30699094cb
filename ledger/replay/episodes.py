"""Randomized fault-injected episodes, driven through the HTTP API and checked against the reference model.

Each episode has its own workflow and intent. A seeded ``random.Random`` picks, step by step, what
happens in the field: the inputs change, the image changes, an owner bumps the policy, a trigger is
delivered twice, the agent crashes mid-stage, a deploy times out after its push succeeded, a page
check fails, a step keeps failing until the intent escalates, on-call retries or abandons, a short
checkpoint TTL runs out. Every trigger's decision (outcome, reason code, ``resume_from``, the effects
to verify) is compared with ``ReferenceModel.decide``; an episode stops at its first wrong decision,
since the model and the product no longer agree on the world after it.

The agent is well behaved: it follows the decision, performs an effect only after its ``started``
claim was granted, and verifies through the simulated world, which tells the truth. One thing is
not done through the API: a dead agent's lease running out is simulated by moving its deadline into
the past (the same as waiting ``lease_seconds``); a checkpoint TTL runs out for real (1 s, slept).
"""

from __future__ import annotations

import logging
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal

from django.utils import timezone

from ledger.models import Run, Workflow
from ledger.replay.reference import Expected, ModelRun, ReferenceModel
from ledger.replay.world import Api, EpisodeError, World, moment

STAGES = ["draft", "push", "build", "deploy", "check"]
EFFECT_STAGES = ["push", "deploy"]
WORKING = ("fresh", "resume", "verify_only")
FAULTS = ("none", "none", "die_between", "die_mid", "die_after_success", "timeout", "timeout", "refused",
          "check_fails", "fails_first", "fails_first", "sloppy", "duplicate_trigger")
EFFECT_FAULTS = ("die_after_success", "timeout", "refused", "sloppy")


@dataclass
class Tally:
    episodes: int = 0
    decisions: int = 0
    correct: int = 0
    completions: int = 0
    unverified: int = 0
    effects: int = 0
    reexecuted: int = 0  # keys performed again after verification proved them absent (allowed)
    duplicates: list = field(default_factory=list)
    mismatches: list = field(default_factory=list)  # {episode, workflow, step, expected, actual, log}
    errors: list = field(default_factory=list)  # {episode, workflow, error, log}
    reasons: Counter = field(default_factory=Counter)  # (outcome, reason_code) -> times seen (right ones)
    faults: Counter = field(default_factory=Counter)

    @property
    def accuracy(self) -> float:
        return self.correct / self.decisions if self.decisions else 0.0


class Mismatch(Exception):
    pass


class Episode:
    def __init__(self, *, api: Api, rng: random.Random, index: int, prefix: str, tally: Tally):
        self.api, self.rng, self.index, self.tally = api, rng, index, tally
        self.short_ttl = rng.random() < 0.08
        self.max_retries = rng.choice([1, 2, 3, 3])
        ttl = 1 if self.short_ttl else 86400
        # SPEC §16: some workflows set a day budget their agent's usage (on each success) spends
        self.day_budget = rng.choice([None, None, None, Decimal("0.05"), Decimal("0.12")])
        # Set up like an owner would; the API refuses TTLs under 60 s (the SPEC allows 1 s), hence the ORM.
        self.workflow = Workflow.objects.create(
            slug=f"{prefix}-{index}", title=f"replay episode {index}", stages=STAGES, effect_stages=EFFECT_STAGES,
            approval_stages=[], max_retries=self.max_retries, checkpoint_ttl_seconds=ttl, owner=api.owner_user,
            budget={"cost_usd_per_day": str(self.day_budget)} if self.day_budget is not None else {})
        self.model = ReferenceModel(stages=STAGES, effect_stages=EFFECT_STAGES, max_retries=self.max_retries,
                                    ttl_seconds=ttl, cost_usd_per_day=self.day_budget)
        self.world = World()
        self.intent = f"post-{index}"
        self.version, self.versions, self.policy, self.env = 1, 1, "1", "img:1"
        self.keys: dict[tuple[str, str], str] = {}  # (fp, stage) -> idempotency key
        self.triggers = 0
        self.log: list[str] = []
        self.slept = False

    @property
    def fp(self) -> str:
        return f"inputs-v{self.version}/policy-{self.policy}"

    def note(self, text: str) -> None:
        self.log.append(text)

    # ------------------------------------------------------------ the episode

    def play(self) -> None:
        self.tally.episodes += 1
        try:
            for _ in range(self.rng.randint(3, 7)):
                self.step()
        except Mismatch:
            pass
        except EpisodeError as exc:
            self.tally.errors.append({"episode": self.index, "workflow": self.workflow.slug, "error": str(exc),
                                      "log": self.log[-25:]})
        self.tally.effects += len(self.world.performed)
        self.tally.reexecuted += sum(1 for n in self.world.performed.values() if n > 1)
        self.tally.duplicates += [(self.workflow.slug, key) for key in self.world.duplicates()]

    def step(self) -> None:
        self.change_world()
        escalated = next((r for r in self.model.runs if r.state == "escalated" and r.fp == self.fp), None)
        if escalated is not None and self.rng.random() < 0.7:
            if self.rng.random() < 0.8:
                run, body, leased = self.oncall_retry(escalated)
                if leased:
                    self.work(run, body)
            else:
                self.api.call("oncall", "POST", f"/api/v1/runs/{escalated.id}/abandon/", {"reason": "replay: give up"})
                self.model.abandoned(escalated)
                self.note(f"on-call abandoned {escalated.id}")
            return
        run, body = self.trigger()
        if body["decision"]["outcome"] in WORKING:
            self.work(run, body)

    def change_world(self) -> None:
        rng = self.rng
        if rng.random() < 0.12:
            if self.versions > 1 and rng.random() < 0.3:
                self.version = rng.randint(1, self.versions)  # back to an earlier source version
            else:
                self.versions += 1
                self.version = self.versions
            self.note(f"inputs now v{self.version}")
        if rng.random() < 0.15:
            self.env = f"img:{int(self.env.split(':')[1]) + 1}"
            self.note(f"env now {self.env}")
        if rng.random() < 0.07:
            self.policy = str(int(self.policy) + 1)
            self.api.call("owner", "PATCH", f"/api/v1/workflows/{self.workflow.slug}/",
                          {"policy_version": self.policy, "reason": "replay: policy bump"}, expect=(200,))
            self.note(f"policy bumped to {self.policy}")
        if self.short_ttl and not self.slept and self.model.checkpoints and rng.random() < 0.5:
            time.sleep(1.15)  # the 1 s checkpoint TTL runs out for real
            self.slept = True
            self.note("slept past the checkpoint TTL")

    # ------------------------------------------------------------ decisions

    def trigger(self, *, key: str | None = None) -> tuple[ModelRun, dict]:
        self.triggers += 1
        key = key or f"trigger-{self.triggers}"
        body = {"workflow": self.workflow.slug, "intent": self.intent, "trigger_key": key,
                "inputs": {"source": f"v{self.version}"}, "env_fingerprint": self.env}
        _, run = self.api.call("agent", "POST", "/api/v1/runs/", body, expect=(201,))
        expected = self.model.decide(fp=self.fp, policy=self.policy, env=self.env, now=moment(run["created_at"]))
        self.judge(f"trigger {key} ({self.fp}, {self.env})", expected, run)
        return self.model.run_decided(run_id=run["id"], fp=self.fp, policy=self.policy, env=self.env,
                                      expected=expected), run

    def redeliver(self, key: str, run_id: str) -> None:
        """The same trigger delivered again is the same run, whatever happened since."""
        body = {"workflow": self.workflow.slug, "intent": self.intent, "trigger_key": key,
                "inputs": {"source": f"v{self.version}"}, "env_fingerprint": self.env}
        status, run = self.api.call("agent", "POST", "/api/v1/runs/", body)
        self.tally.decisions += 1
        if status == 200 and run.get("duplicate") is True and run["id"] == run_id:
            self.tally.correct += 1
            self.tally.reasons[("duplicate", "same_trigger_key")] += 1
            self.note(f"redelivered {key}: same run")
            return
        self.mismatch(f"redeliver {key}", {"duplicate": True, "id": run_id},
                      {"status": status, "duplicate": run.get("duplicate"), "id": run.get("id")})

    def oncall_retry(self, run: ModelRun) -> tuple[ModelRun, dict, bool]:
        """On-call retries ``run``; the episode's agent leases it, or (sometimes) nobody does in time."""
        _, body = self.api.call("oncall", "POST", f"/api/v1/runs/{run.id}/retry/", {"reason": "replay: retry"},
                                expect=(200,))
        expected = self.model.retried(run, now=moment(body["decided_at"]))
        self.judge(f"on-call retry of {run.id}", expected, body)
        if body["decision"]["outcome"] not in WORKING:
            return run, body, False
        if self.rng.random() < 0.25:  # the queue time runs out: the next trigger finds it failed not_leased
            Run.objects.filter(id=run.id).update(queued_until=timezone.now() - timedelta(seconds=1))
            self.model.queue_ran_out(run)
            self.note(f"nobody leased {run.id}")
            self.tally.faults["never_leased"] += 1
            return run, body, False
        # A retried run is queued for an agent (SPEC §9.1): the episode's agent leases it first.
        _, leased = self.api.call("agent", "POST", "/api/v1/runs/lease/", {"workflows": [self.workflow.slug]},
                                  expect=(200,))
        if leased["id"] != str(run.id):
            raise EpisodeError(f"lease after the retry of {run.id} gave {leased['id']}")
        self.note(f"agent leased {run.id}")
        return run, body, True

    def judge(self, what: str, expected: Expected, run: dict) -> None:
        actual = run["decision"]
        wanted = {"outcome": expected.outcome, "reason_code": expected.reason_code}
        got = {"outcome": actual.get("outcome"), "reason_code": actual.get("reason_code")}
        if expected.outcome in WORKING:
            wanted["resume_from"], got["resume_from"] = expected.resume_from, actual.get("resume_from")
        wanted["verify_effects"] = sorted(self.keys.get((self.model_fp(run), s), f"<{s}>")
                                          for s in expected.verify_stages)
        got["verify_effects"] = sorted(actual.get("verify_effects") or [])
        self.tally.decisions += 1
        if wanted != got:
            self.mismatch(what, wanted, got)
        self.tally.correct += 1
        self.tally.reasons[(expected.outcome, expected.reason_code)] += 1
        self.note(f"{what}: {expected.outcome}/{expected.reason_code} from {expected.resume_from}")

    def model_fp(self, run: dict) -> str:
        known = next((r for r in self.model.runs if r.id == run["id"]), None)
        return known.fp if known else self.fp

    def mismatch(self, what: str, wanted: dict, got: dict):
        self.tally.mismatches.append({"episode": self.index, "workflow": self.workflow.slug, "step": what,
                                      "expected": wanted, "actual": got, "log": self.log[-25:]})
        raise Mismatch(what)

    # ------------------------------------------------------------ the agent

    def event(self, run: ModelRun, stage: str, kind: str, *, expect=(201,), **fields) -> dict:
        cost = Decimal(self.rng.choice(["0.01", "0.02", "0.03"])) if kind == "succeeded" else Decimal(0)
        if cost:
            fields["usage"] = {"input_tokens": self.rng.randint(0, 500), "cost_usd": str(cost)}
        body = {"client_event_id": f"{run.id}-{len(self.log)}-{stage}-{kind}", "stage": stage, "kind": kind, **fields}
        status, event = self.api.call("agent", "POST", f"/api/v1/runs/{run.id}/events/", body, expect=expect)
        if status in (200, 201):
            self.model.event(run, stage, kind, at=moment(event["at"]), cost=cost if status == 201 else Decimal(0))
            if event.get("idempotency_key"):
                self.keys[(run.fp, stage)] = event["idempotency_key"]
        self.note(f"  {stage}:{kind} -> {status}")
        return event

    def verify(self, run: ModelRun, stage: str, view: dict) -> None:
        """Check the world and say what it holds: verified, or checked and found absent."""
        key = self.keys[(run.fp, stage)]
        if self.world.holds(key):
            self.event(run, stage, "verified", evidence=[{"uri": f"https://replay.test/{stage}/{key[:12]}",
                                                          "observed_at": timezone.now().isoformat()}])
            view[stage] = "verified"
        else:
            self.event(run, stage, "failed", reason_code="effect_absent")
            view[stage] = "failed"

    def die(self, run: ModelRun, key_hint: str) -> None:
        """The agent is gone. Maybe a trigger arrives while its lease still runs; then the lease runs out."""
        self.note(f"  agent died on {key_hint}")
        if self.rng.random() < 0.3:
            self.trigger()  # noop / active_run_exists while the lease is live
        Run.objects.filter(id=run.id).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
        self.model.lease_ran_out(run)

    def work(self, run: ModelRun, body: dict) -> None:
        """Honour the decision: verify what is listed, then the first stage not done, until done or a fault."""
        rng = self.rng
        view = {stage: entry.get("status") for stage, entry in (body.get("stage_states") or {}).items()}
        for key in body["decision"].get("verify_effects") or []:
            stage = next((s for (_, s), k in self.keys.items() if k == key), None)
            if stage is None:
                raise EpisodeError(f"asked to verify {key}, which no started event of this episode claimed")
            self.verify(run, stage, view)
        pending = [s for s in STAGES if not self.model.done(s, view.get(s))]
        fault = rng.choice(FAULTS)
        effect_pending = [s for s in pending if s in EFFECT_STAGES]
        if fault in EFFECT_FAULTS and not effect_pending:
            fault = "die_mid"
        target = rng.choice(effect_pending if fault in EFFECT_FAULTS else pending) if pending else None
        if fault == "check_fails":
            target = "check" if "check" in pending else None
        if fault == "fails_first":
            target = pending[0] if pending else None
        self.tally.faults[fault if target else "none"] += 1
        while True:
            stage = next((s for s in STAGES if not self.model.done(s, view.get(s))), None)
            if stage is None:
                return self.completed(run)
            hit = fault if stage == target else "none"
            if hit != "none":
                target = None  # a fault hits once
            if hit == "die_between":
                return self.die(run, f"before {stage}")
            if hit == "duplicate_trigger":
                self.redeliver(body["trigger_key"], run.id)
                self.trigger()  # a new key while the run holds the intent
            if hit == "none" and rng.random() < 0.07:
                self.event(run, stage, "skipped")
                view[stage] = "skipped"
                continue
            self.event(run, stage, "started")
            if stage in EFFECT_STAGES:
                if self.act(run, stage, hit, view) == "stop":
                    return
                continue
            if hit == "die_mid":
                return self.die(run, f"in {stage}")
            if hit in ("check_fails", "fails_first"):
                self.event(run, stage, "failed", reason_code="page_check_failed" if stage == "check" else "step_failed")
                return
            self.event(run, stage, "succeeded")
            view[stage] = "succeeded"

    def act(self, run: ModelRun, stage: str, hit: str, view: dict) -> str | None:
        """An effect stage whose claim was just granted: perform it, report, verify (or the fault)."""
        key = self.keys[(run.fp, stage)]
        effect = {"system": "replay", "operation": stage, "reference": f"{stage}-{key[:12]}"}
        if hit == "die_mid":
            if self.rng.random() < 0.5:
                self.world.perform(key)  # performed, the report never sent
            self.die(run, f"in {stage}")
            return "stop"
        if hit == "refused":
            self.world.perform(key, lands=False)
            self.event(run, stage, "failed", reason_code="deploy_refused")
            return "stop"
        if hit == "fails_first":
            self.event(run, stage, "failed", reason_code="step_failed")
            return "stop"
        if hit == "timeout":
            self.world.perform(key, lands=self.rng.random() < 0.5)
            self.event(run, stage, "unknown", effect={**effect, "reference": ""}, reason_code="timeout")
            view[stage] = "unknown"
            if self.rng.random() < 0.5:
                self.verify(run, stage, view)
                return None
            self.die(run, f"after {stage} timed out")
            return "stop"
        self.world.perform(key)
        self.event(run, stage, "succeeded", effect=effect)
        view[stage] = "succeeded"
        if hit == "die_after_success":
            self.die(run, f"after {stage} succeeded, before verifying")
            return "stop"
        if hit == "sloppy":  # tries to move on without verifying: must be refused
            later = next((s for s in STAGES[STAGES.index(stage) + 1:] if not self.model.done(s, view.get(s))), None)
            if later:
                self.event(run, later, "started", expect=(409,))
        self.verify(run, stage, view)
        return None

    def completed(self, run: ModelRun) -> None:
        """Every stage done: the run must be completed, and every effect stage of its inputs verified."""
        _, detail = self.api.call("agent", "GET", f"/api/v1/runs/{run.id}/", expect=(200,))
        if detail["state"] != "completed" or run.state != "completed":
            raise EpisodeError(f"run {run.id} passed every stage but is {detail['state']!r} "
                               f"(model: {run.state!r})")
        self.tally.completions += 1
        for stage in EFFECT_STAGES:
            status = (detail["stage_states"].get(stage) or {}).get("status")
            if status == "skipped":
                continue
            key = self.keys.get((run.fp, stage))
            effects = self.api.call("agent", "GET", "/api/v1/effects/", {"idempotency_key": key or "-"},
                                    expect=(200,))[1].get("results", [])
            if not (key and self.world.holds(key) and effects and effects[0]["status"] == "verified"):
                self.tally.unverified += 1
                self.note(f"  completed with {stage} unverified")
                return
        self.note("  completed, effects verified")


def replay(*, episodes: int, seed: int, prefix: str, progress=None) -> Tally:
    """Play ``episodes`` episodes from ``seed``; ``progress(done, tally)`` every 10 episodes."""
    rng = random.Random(seed)
    api = Api(prefix=prefix)
    tally = Tally()
    request_log = logging.getLogger("django.request")
    level = request_log.level
    request_log.setLevel(logging.ERROR)  # the refusals the episodes provoke on purpose are not news
    try:
        for index in range(1, episodes + 1):
            Episode(api=api, rng=random.Random(rng.getrandbits(64)), index=index, prefix=prefix, tally=tally).play()
            if progress and (index % 10 == 0 or index == episodes):
                progress(index, tally)
    finally:
        request_log.setLevel(level)
    return tally
