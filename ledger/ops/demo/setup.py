"""The demo's world, created through the services in-process (the command runs with the server's settings).

Idempotent: users, workflows and claims that exist are left as they are; agent and operator tokens are
issued afresh on every start (only their hashes are stored, so an old one cannot be shown again).
"""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from knowledge.models import ClaimHead
from knowledge.services import claim_propose, claim_revoke
from ledger import services
from ledger.auth import token_issue
from ledger.identities import agent_create, operator_create
from ledger.models import Agent, Workflow
from ledger.ops.demo import DEMO_PASSWORD, OPERATORS
from ledger.ops.demo.backlog import FLEET_EDITOR, FLEET_ONCALL
from ledger.ops.demo.claims import CLAIMS

WORKFLOW_DEFINITIONS = {
    "research-publish": {
        "title": "Daily research and publish",
        "stages": ["gather", "draft", "fact_check", "commit", "push", "publish", "page_check"],
        "effect_stages": ["commit", "push", "publish"],
        "approval_stages": ["publish"],
        # Stateboard performs the publish itself (SPEC §5.2); `record` performs nothing outside.
        "executors": {"publish": {"handler": "record", "config": {}}},
        "knowledge_scope": {"system": "blog", "task": "publish"},
        "schedule": "0 6 * * *",
        "schedule_intent": "post/daily",
        "schedule_inputs": {"feeds": "daily-digest"},
        "max_retries": 3,
    },
    "ci-triage": {
        "title": "CI failure triage",
        "stages": ["collect_logs", "reproduce", "diagnose", "patch", "build", "push", "deploy", "recheck"],
        "effect_stages": ["push", "deploy"],
        "approval_stages": [],
        "knowledge_scope": {"system": "ci", "task": "triage"},
        "max_retries": 2,
        # Short, so an agent that died during a deploy is noticed within the demo's pass.
        "lease_seconds": 12,
    },
    "security-triage": {
        "title": "Security finding triage",
        "stages": ["ingest", "enrich", "assess", "ticket", "advisory", "close"],
        "effect_stages": ["ticket", "advisory"],
        "approval_stages": ["advisory"],
        "knowledge_scope": {"system": "payments-api", "task": "security"},
        "max_retries": 3,
    },
}
SHAPE = ("stages", "effect_stages", "approval_stages", "executors", "knowledge_scope", "max_retries",
         "lease_seconds")

def _agent(name: str, owner) -> str:
    agent = Agent.objects.filter(user__username=name).select_related("user").first()
    if agent is None:
        return agent_create(name=name, owner=owner)[1]
    return token_issue(user=agent.user)


def _workflows(owner) -> list[str]:
    made = []
    for slug, definition in WORKFLOW_DEFINITIONS.items():
        existing = Workflow.objects.filter(slug=slug).first()
        if existing is None:
            services.workflow_create(user=owner, data={"slug": slug, **definition})
            made.append(slug)
            continue
        # A database seeded by an older demo may hold another shape under this slug: the fleet needs its own.
        wanted = {k: definition[k] for k in SHAPE if k in definition}
        if any(getattr(existing, k) != v for k, v in wanted.items()):  # another shape needs another policy version
            wanted["policy_version"] = f"{existing.policy_version[:90]}-demo"
            services.workflow_update(user=owner, slug=slug, data=wanted, reason="demo: the fleet's definition")
    return made


def _claims(agent_user, owner) -> None:
    now = timezone.now()
    for spec in CLAIMS:
        if ClaimHead.objects.filter(key=spec["key"], latest_version__gt=0).exists():
            continue
        at = now - timedelta(days=12) if spec.get("stale") else now
        data = {"key": spec["key"], "statement": spec["statement"], "source_refs": spec["source_refs"],
                "source_type": spec.get("source_type", "official-doc"), "scope": spec["scope"],
                "confidence": spec.get("confidence", "reported"),
                "observed_at": (at - timedelta(hours=1)).isoformat(),
                "refresh_after": (now + timedelta(days=-1 if spec.get("stale") else 14)).isoformat()}
        claim_propose(user=agent_user, data=data, now=at)
        if spec.get("revoke"):
            claim_revoke(user=owner, key=spec["key"], reason=spec["revoke"])



@transaction.atomic
def demo_setup(*, agents: int = 3) -> dict:
    """Operators, ``agents`` agent identities, the three workflows and the claims; returns the tokens."""
    tokens = {}
    for role in OPERATORS:
        user, token = operator_create(name=role, role=role, password=DEMO_PASSWORD, with_token=role in ("editor", "oncall"))
        if token:
            tokens[role] = token
    # the fleet settles its own approvals as a colleague of its own, never as the `editor` you sign in as
    _, tokens[FLEET_EDITOR] = operator_create(name=FLEET_EDITOR, role="editor", with_token=True)
    operator_create(name=FLEET_ONCALL, role="oncall")  # tidies the demo's own escalations (demo.backlog)
    owner = get_user_model().objects.get(username="owner")
    names = [f"demo-agent-{i}" for i in range(1, agents + 1)]
    agent_tokens = {name: _agent(name, owner) for name in names}
    made = _workflows(owner)
    _claims(get_user_model().objects.get(username=names[0]), owner)
    return {"password": DEMO_PASSWORD, "users": list(OPERATORS), "agents": agent_tokens, "tokens": tokens,
            "workflows_created": made}
