"""Demo data for `manage.py up`: operators, an agent, workflows and runs in telling states."""

from django.contrib.auth import get_user_model
from django.db import transaction

from ledger import services
from ledger.identities import agent_create, operator_create
from ledger.models import Workflow

DEMO_PASSWORD = "stateboard-demo"
EVIDENCE = [{"uri": "https://ci.example/deploys/42", "observed_at": "2026-11-29T09:00:00+00:00",
             "digest": "sha256:9f2c", "excerpt": "deployment 42 healthy"}]


def _drive(run_id, actor, *steps):
    for stage, kind, extra in steps:
        services.event_append(run_id=run_id, body={"stage": stage, "kind": kind, **extra}, actor=actor)


def _through(stages, *, effect_stages=()):
    steps = []
    for stage in stages:
        steps.append((stage, "started", {}))
        if stage in effect_stages:
            steps.append((stage, "succeeded", {"effect": {"system": "git", "operation": stage,
                                                          "reference": f"{stage}-a1b2c3"}}))
            steps.append((stage, "verified", {"evidence": EVIDENCE}))
        else:
            steps.append((stage, "succeeded", {}))
    return steps


@transaction.atomic
def demo_seed() -> dict | None:
    """Idempotent: does nothing when the demo workflow exists. Returns credentials when it seeds."""
    if Workflow.objects.filter(slug="daily-research").exists():
        return None
    for role in ("editor", "owner", "oncall", "viewer"):
        operator_create(name=role, role=role, password=DEMO_PASSWORD)
    owner = get_user_model().objects.get(username="owner")
    agent, token = agent_create(name="demo-agent", owner=owner)
    actor = "agent:demo-agent"
    research = Workflow.objects.create(slug="daily-research", title="Daily research and publish", owner=owner,
                                       schedule="0 6 * * *")
    Workflow.objects.create(slug="ci-triage", title="CI failure triage", owner=owner,
                            stages=["discovery", "assessment", "draft", "commit", "push"],
                            effect_stages=["commit", "push"], approval_stages=[])

    stages = research.stages
    # 1. A completed run: every effect verified.
    run, _ = services.run_trigger(workflow_slug="daily-research", intent="post/2026-11-27", inputs={"sources": "v1"},
                                  actor=actor)
    _drive(run.id, actor, *_through(stages[:6], effect_stages=research.effect_stages))
    approval, _ = services.approval_request(run_id=run.id, kind="high_impact", stage="deploy", actor=actor,
                                            action={"system": "k8s", "operation": "deploy", "target": "blog",
                                                    "summary": "Publish post 2026-11-27"})
    services.approval_decide(approval_id=approval.id, user=get_user_model().objects.get(username="editor"),
                             approve=True, reason="looks right")
    _drive(run.id, actor, ("deploy", "started", {"action": approval.action}),
           ("deploy", "succeeded", {"effect": {"system": "k8s", "operation": "deploy", "reference": "deploy-41"}}),
           ("deploy", "verified", {"evidence": EVIDENCE}), ("verify", "started", {}), ("verify", "succeeded", {}))
    # 2. Waiting for an editor: deploy needs approval.
    run, _ = services.run_trigger(workflow_slug="daily-research", intent="post/2026-11-28", inputs={"sources": "v2"},
                                  actor=actor)
    _drive(run.id, actor, *_through(stages[:6], effect_stages=research.effect_stages))
    services.approval_request(run_id=run.id, kind="high_impact", stage="deploy", actor=actor,
                              action={"system": "k8s", "operation": "deploy", "target": "blog",
                                      "summary": "Publish post 2026-11-28"})
    # 3. A deploy whose outcome is unknown (timeout): the next trigger may only verify it.
    run, _ = services.run_trigger(workflow_slug="ci-triage", intent="pr/1234", inputs={"failure": "flaky-test"},
                                  actor=actor)
    _drive(run.id, actor, *_through(["discovery", "assessment", "draft"]), ("commit", "started", {}),
           ("commit", "unknown", {"reason_code": "timeout"}))
    # 4. A build that keeps failing: escalated once the retry budget is spent.
    for attempt in range(research.max_retries + 1):
        run, _ = services.run_trigger(workflow_slug="daily-research", intent="post/2026-11-29",
                                      inputs={"sources": "v3"}, actor=actor)
        if run.state in ("fresh", "resume"):
            steps = _through(stages[:3]) if attempt == 0 else []
            _drive(run.id, actor, *steps, ("build", "started", {}), ("build", "failed", {"reason_code": "tests_red"}))
    _demo_claims(agent.user)
    return {"password": DEMO_PASSWORD, "users": ["editor", "owner", "oncall", "viewer"], "agent_token": token}


def _demo_claims(agent_user) -> None:
    """A fact, a stale claim (served as a lead) and an inference awaiting review."""
    from datetime import timedelta

    from django.utils import timezone

    from knowledge.services import claim_propose

    now = timezone.now()
    base = {"source_type": "official-doc", "scope": {"system": "blog", "version": "2", "task": "publish"},
            "confidence": "reported"}
    claim_propose(user=agent_user, data={
        **base, "key": "blog/publish-window", "statement": "Posts publish between 06:00 and 07:00 UTC.",
        "source_refs": ["https://docs.example.com/blog/publishing"],
        "observed_at": (now - timedelta(hours=2)).isoformat(), "refresh_after": (now + timedelta(days=10)).isoformat()})
    past = now - timedelta(days=12)
    claim_propose(user=agent_user, now=past, data={
        **base, "key": "blog/cdn-ttl", "statement": "The CDN caches posts for 10 minutes.",
        "source_refs": ["https://docs.example.com/cdn"],
        "observed_at": (past - timedelta(hours=1)).isoformat(), "refresh_after": (now - timedelta(days=1)).isoformat()})
    claim_propose(user=agent_user, data={
        **base, "key": "blog/deploy-flaky", "statement": "Deploys fail when the image cache is cold.",
        "confidence": "engineering-inference", "source_refs": ["https://ci.example/runs/881"],
        "observed_at": (now - timedelta(hours=1)).isoformat(), "refresh_after": (now + timedelta(days=7)).isoformat()})
