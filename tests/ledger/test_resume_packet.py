"""The resume packet: within budget, facts only from active in-scope claims, stale ones only as leads."""

import json
import math
from datetime import timedelta

import pytest
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from knowledge import services as knowledge_services
from ledger import services
from ledger.resume import resume_packet
from stateboard.errors import Invalid
from tests.factories import client_for, make_agent, make_operator, make_workflow, unique

pytestmark = pytest.mark.django_db

CLAIM = st.fixed_dictionaries({
    "in_scope": st.sampled_from([True, True, False]),
    "fate": st.sampled_from(["active", "active", "stale", "invalidated", "revoked"]),
    "sensitive": st.booleans(),
    "words": st.integers(min_value=1, max_value=60),
    "age_days": st.integers(min_value=1, max_value=50),
})


def _size(packet) -> int:
    return len(json.dumps(packet, ensure_ascii=False, separators=(",", ":")).encode())


def _claim(owner, spec, now, system) -> tuple[str, str]:
    """Propose a claim as ``owner`` in ``system`` (or another one) with the fate in ``spec``; (key, fate)."""
    system = system if spec["in_scope"] else unique("elsewhere")
    key = unique(f"{system}/fact")
    observed = now - timedelta(days=spec["age_days"])
    refresh = observed + (timedelta(hours=spec["age_days"] * 12) if spec["fate"] == "stale"
                          else timedelta(days=spec["age_days"] + 30))
    data = {"key": key, "statement": " ".join(["word"] * spec["words"]), "source_refs": ["https://docs.test/x"],
            "source_type": "official-doc", "scope": {"system": system, "task": "triage"},
            "confidence": "reported", "observed_at": observed.isoformat(), "refresh_after": refresh.isoformat(),
            "sensitivity": "sensitive" if spec["sensitive"] else "internal"}
    if spec["sensitive"]:
        data["retention_until"] = (now + timedelta(days=365)).isoformat()
    knowledge_services.claim_propose(user=owner, data=data, now=observed)
    if spec["fate"] == "invalidated":
        knowledge_services.claim_invalidate(user=owner, key=key, reason="wrong")
    elif spec["fate"] == "revoked":
        knowledge_services.claim_revoke(user=owner, key=key, reason="withdrawn")
    return key, spec["fate"]


def _run(workflow, agent_user, system):
    run, _ = services.run_trigger(workflow_slug=workflow.slug, inputs={"v": 1}, actor=f"agent:{agent_user.username}")
    run.workflow.knowledge_scope = {"system": system, "task": "triage"}
    return run


@pytest.mark.slow  # a property: 20 generated sets of claims through the database (the full suite runs it)
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(st.lists(CLAIM, max_size=12), st.integers(min_value=200, max_value=1500))
def test_resume_packet_within_budget_and_scope(claims, budget):
    """Never over budget; facts only active in-scope visible claims; leads only stale; tombstones never."""
    now = timezone.now()
    owner, _ = make_operator("owner")
    agent_user, _ = make_agent()  # an agent of nobody: it may not read sensitive claims
    system = unique("billing")
    fates = dict(_claim(owner, spec, now, system) for spec in claims)
    in_scope = {key for key in fates if key.startswith(f"{system}/")}
    sensitive = {key for key, spec in zip(fates, claims) if spec["sensitive"]}
    run = _run(make_workflow(), agent_user, system)
    try:
        packet = resume_packet(run=run, user=agent_user, budget_tokens=budget, now=now)
    except Invalid as exc:
        assert exc.code == "budget_too_small"
        return
    assert packet["approx_tokens"] <= budget
    assert math.ceil(_size(packet) / 4) <= packet["approx_tokens"]
    facts = {fact["key"] for fact in packet["facts"]}
    leads = {lead["key"] for lead in packet["leads"]}
    assert facts <= {k for k in in_scope - sensitive if fates[k] == "active"}
    assert leads <= {k for k in in_scope - sensitive if fates[k] == "stale"}
    expected_facts = len([k for k in in_scope - sensitive if fates[k] == "active"])
    expected_leads = len([k for k in in_scope - sensitive if fates[k] == "stale"])
    assert len(facts) + packet["omitted"]["facts"] == expected_facts
    assert len(leads) + packet["omitted"]["leads"] == expected_leads
    if packet["omitted"]["facts"]:
        assert not leads, "leads are dropped before any fact"


def test_resume_packet_drops_the_longest_stale_lead_first():
    """With room for one lead, the one that went stale most recently stays."""
    now = timezone.now()
    owner, _ = make_operator("owner")
    agent_user, _ = make_agent(owner=owner)
    stale = {"in_scope": True, "fate": "stale", "sensitive": False, "words": 20}
    old, _ = _claim(owner, {**stale, "age_days": 40}, now, "billing-leads")
    recent, _ = _claim(owner, {**stale, "age_days": 3}, now, "billing-leads")
    run = _run(make_workflow(), agent_user, "billing-leads")
    full = resume_packet(run=run, user=agent_user, budget_tokens=100_000, now=now)
    assert {lead["key"] for lead in full["leads"]} == {old, recent}
    lead_tokens = math.ceil((_size(full["leads"][0]) + 1) / 4)
    tight = resume_packet(run=run, user=agent_user, budget_tokens=full["approx_tokens"] - lead_tokens // 2, now=now)
    assert [lead["key"] for lead in tight["leads"]] == [recent] and tight["omitted"]["leads"] == 1


def test_resume_packet_api_answers_the_packet_and_refuses_bad_budgets():
    """GET /runs/{id}/resume-packet/: 200 with the packet; bad budget 400; too small a budget 422."""
    workflow = make_workflow(stages=[f"stage-{i}" for i in range(30)], effect_stages=[], approval_stages=[])
    agent_user, token = make_agent()
    run, _ = services.run_trigger(workflow_slug=workflow.slug, inputs={"topic": "x" * 900},
                                  actor=f"agent:{agent_user.username}")
    api = client_for(token)
    url = f"/api/v1/runs/{run.id}/resume-packet/"
    body = api.get(url).json()
    assert body["run"]["id"] == str(run.id) and body["decision"]["outcome"] == "fresh"
    assert [s["stage"] for s in body["stages"]] == workflow.stages and body["rules"]
    assert body["approx_tokens"] <= 2000 and body["facts"] == [] and body["omitted"] == {"facts": 0, "leads": 0}
    for bad in ("abc", "199", "100001"):
        response = api.get(url, {"budget_tokens": bad})
        assert response.status_code == 400 and response.json()["code"] == "invalid_budget", bad
    response = api.get(url, {"budget_tokens": 200})
    assert response.status_code == 422 and response.json()["code"] == "budget_too_small"
    assert api.get("/api/v1/runs/not-a-uuid/resume-packet/").status_code == 404


def test_resume_packet_carries_the_runs_goal_version_and_staged_flag():
    """SPEC §9.2/§10.1: the packet names the goal version the run works under, with its objective,
    constraints and acceptance criteria; a staged run says so; a goal-less intent has inputs only."""
    workflow = make_workflow(stages=["build"], effect_stages=[], approval_stages=[])
    owner, _ = make_operator("owner")
    agent_user, _ = make_agent()
    actor = f"agent:{agent_user.username}"
    plain, _ = services.run_trigger(workflow_slug=workflow.slug, intent="no-goal", inputs={"v": 1}, actor=actor)
    packet = resume_packet(run=plain, user=agent_user)
    assert packet["goal"] == {"inputs": {"v": 1}} and packet["run"]["goal_version"] is None
    services.goal_create(workflow_slug=workflow.slug, intent="post", objective="Publish", constraints=["no paywalls"],
                         acceptance=["cites sources"], change="replace", user=owner)
    services.goal_create(workflow_slug=workflow.slug, intent="post", acceptance=["under 800 words"], user=owner)
    staged, _ = services.run_trigger(workflow_slug=workflow.slug, intent="post", inputs={"v": 2}, actor=actor,
                                     staged=True)
    packet = resume_packet(run=staged, user=agent_user)
    assert packet["run"]["staged"] is True and packet["run"]["goal_version"] == 2
    assert packet["goal"] == {"inputs": {"v": 2}, "objective": "Publish", "constraints": ["no paywalls"],
                              "acceptance": ["cites sources", "under 800 words"]}


@pytest.mark.slow  # a property: 25 generated histories of outcomes, each run page rendered through the database (the full suite runs it)
@given(outcomes=st.lists(st.sampled_from(["verified", "succeeded", "unknown"]), min_size=1, max_size=3))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_a_stage_whose_effect_is_not_verified_is_unknown_in_the_packet_and_on_the_run_page(outcomes):
    """SPEC §11.3: whatever the effect stages reported, the packet of the next run and its run page say
    ``unknown`` for a stage whose effect is attempted, effective or unknown — never succeeded/verified —
    and agree with the effects the ledger holds."""
    from ledger.domain.effects import UNVERIFIED
    from ledger.models import Effect, Run
    from tests.factories import page_client
    from tests.ledger.helpers import AgentDriver

    stages = [f"e{i}" for i in range(len(outcomes))]
    wf = make_workflow(stages=["build", *stages], effect_stages=stages, approval_stages=[])
    driver = AgentDriver(client_for(make_agent()[1]), wf.slug)
    first = driver.trigger(intent="i")
    driver.pass_stage(first["id"], "build")
    for stage, outcome in zip(stages, outcomes):
        driver.event(first["id"], stage, "started")
        effect = {"system": "git", "operation": "push", "reference": f"r-{stage}"}
        driver.event(first["id"], stage, "unknown" if outcome == "unknown" else "succeeded", effect=effect)
        if outcome != "verified":
            break
        driver.event(first["id"], stage, "verified", evidence=[{"uri": "https://ci.test/1",
                                                               "observed_at": timezone.now().isoformat()}])
    Run.objects.filter(id=first["id"]).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    second = driver.trigger(intent="i")
    run = Run.objects.select_related("workflow").get(id=second["id"])
    packet = resume_packet(run=run, user=None)
    held = {e.stage: e.status for e in Effect.objects.filter(workflow=wf, intent="i")}
    page = page_client(make_operator("viewer")[0]).get(f"/runs/{run.id}/")
    shown = {row["stage"]: row["word"] for row in page.context["timeline"]["rows"]}
    for item in packet["stages"]:
        if held.get(item["stage"]) in UNVERIFIED:
            assert item["status"] == "unknown", (item, held)
        assert item["status"] != "verified" or held.get(item["stage"]) in (None, "verified")
    assert shown == {item["stage"]: item["status"] for item in packet["stages"]}
