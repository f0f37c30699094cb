"""`manage.py demo --once` against a live server: every promised fault, none of them harmful."""

import pytest
from django.core.management import call_command

from ledger.models import Approval, LedgerEvent, Run

pytestmark = pytest.mark.django_db(transaction=True)


def _reasons() -> set[str]:
    return set(LedgerEvent.objects.filter(kind="decided").values_list("reason_code", flat=True))


@pytest.mark.slow  # the demo fleet against a live server
def test_demo_once_produces_every_promised_fault(live_server, capsys):
    """One pass: the ledger holds each fault's decision, an executor effect and a pending approval; 0 duplicates."""
    from ledger import metrics_selectors

    call_command("demo", url=live_server.url, once=True, agents=3)
    out = capsys.readouterr().out
    assert "demo check: every promised fault produced" in out, out
    reasons = _reasons()
    for code in ("active_run_exists", "verified_effect_same_fingerprint", "effect_unverified", "input_changed",
                 "retry_budget_exhausted", "env_changed_downgraded", "resume_incomplete_stage"):
        assert code in reasons, (code, sorted(reasons))
    assert Approval.objects.filter(kind="high_impact", status="pending").exists()
    assert LedgerEvent.objects.filter(actor="system:executor", kind="verified", stage="publish").exists()
    assert Run.objects.filter(state="escalated", decision__reason_code="retry_budget_exhausted").exists()
    assert metrics_selectors.metrics()["duplicate_side_effects"] == 0
    decided = set(Approval.objects.exclude(decided_by="").values_list("decided_by", flat=True))
    assert "user:demo-editor" in decided and "user:editor" not in decided  # the fleet's own operator
    # the agents cite the facts their packet served, so /claims/ 'cited by' names runs (issue 41)
    from knowledge.models import ClaimCitation
    from ledger.ops.demo.claims import FACT_KEYS, STALE_KEYS
    cited = set(ClaimCitation.objects.filter(found=True).values_list("key", flat=True))
    assert cited & FACT_KEYS and not cited & STALE_KEYS, cited
    from django.urls import reverse

    from tests.factories import login
    key = sorted(cited & FACT_KEYS)[0]
    page = login("viewer")[0].get(reverse("knowledge:claim_list"), {"q": key}).content.decode()
    assert "/runs/" in page.split(f'data-claim="{key}"')[1].split("</tr>")[0]


def test_demo_setup_twice_changes_nothing_but_tokens():
    """A second setup keeps the users, workflows and claims as they were and issues working tokens."""
    from knowledge.models import Claim
    from ledger.models import Workflow
    from ledger.ops.demo.setup import demo_setup

    first = demo_setup(agents=2)
    counts = (Workflow.objects.count(), Claim.objects.count())
    second = demo_setup(agents=2)
    assert sorted(first["workflows_created"]) == ["ci-triage", "research-publish", "security-triage"]
    assert second["workflows_created"] == [] and (Workflow.objects.count(), Claim.objects.count()) == counts
    assert set(second["agents"]) == {"demo-agent-1", "demo-agent-2"} and second["agents"] != first["agents"]
    assert Workflow.objects.get(slug="research-publish").executors == {"publish": {"handler": "record", "config": {}}}


def test_demo_check_fails_on_a_missing_fault_or_a_broken_scenario():
    """The end-of-pass check names every promised fault not produced and every scenario error."""
    from django.utils import timezone

    from ledger.ops.demo.fleet import summarize
    from ledger.ops.demo.scenarios import PROMISED

    records = [{"scenario": "publish", "fault": "duplicate_trigger", "run": None},
               {"scenario": "env_change", "error": "StateboardError: 409 illegal_transition"}]
    _, failures = summarize(records, timezone.now())
    assert "env_change: StateboardError: 409 illegal_transition" in failures
    missing = [f for f in failures if f.startswith("fault not produced")]
    assert len(missing) == len(PROMISED) - 1 and not any("duplicate_trigger" in f for f in missing)


@pytest.mark.slow  # agent processes against a live server
def test_the_living_fleet_picks_up_a_queued_run_within_seconds(live_server):
    """Idle agents long-poll for work: a run a human queues (a trigger, an on-call retry) is leased and
    completed by the fleet without waiting for its next round."""
    import time

    from ledger import services
    from ledger.models import Workflow
    from ledger.ops.demo.fleet import Fleet
    from ledger.ops.demo.setup import demo_setup
    from tests.factories import make_operator

    world = demo_setup(agents=1)
    owner, _ = make_operator("owner")
    fleet = Fleet(url=live_server.url, agents=world["agents"], editor_token=world["tokens"]["demo-editor"],
                  executors={}, lease_wait=2, out=lambda line: None)
    fleet.start()
    try:
        workflow = Workflow.objects.get(slug="ci-triage")
        run, _ = services.run_trigger(workflow_slug=workflow.slug, intent="pipeline/by-hand", trigger="human",
                                      trigger_key=None, inputs={"failure": "by-hand", "commit": "abc"},
                                      env_fingerprint="", actor=f"user:{owner.username}")
        assert run.queued_until is not None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            run.refresh_from_db()
            if run.state == "completed":
                break
            time.sleep(0.3)
        assert run.state == "completed"
        assert run.events.filter(kind="leased", actor__startswith="agent:demo-agent-1").exists()
    finally:
        fleet.stop()


@pytest.mark.django_db
def test_the_living_demo_keeps_its_backlog_bounded(monkeypatch):
    """Past the newest BACKLOG_KEEP pending requests and escalated runs of its workflows, the demo's own
    colleagues settle the oldest ones, saying why; runs of other workflows are never touched."""
    from ledger.identities import operator_create
    from ledger.ops.demo import backlog
    from tests.browser.scenarios import (
        agent_driver,
        approval_workflow,
        awaiting_approval_run,
        escalated_run,
        escalation_workflow,
    )

    operator_create(name=backlog.FLEET_EDITOR, role="editor")
    operator_create(name=backlog.FLEET_ONCALL, role="oncall")
    asking, failing, other = approval_workflow(), escalation_workflow(), escalation_workflow()
    monkeypatch.setattr(backlog, "WORKFLOWS", (asking.slug, failing.slug))
    approvals = [awaiting_approval_run(agent_driver(asking), f"ask-{n}")[1]["id"] for n in range(4)]
    escalated = [escalated_run(agent_driver(failing), f"esc-{n}")[1]["id"] for n in range(4)]
    _, outsider = escalated_run(agent_driver(other), "not-the-demos")

    assert backlog.backlog_tidy(keep=2) == {"rejected": 2, "abandoned": 2}
    assert [Approval.objects.get(id=a).status for a in approvals] == ["rejected", "rejected", "pending", "pending"]
    assert [Run.objects.get(id=r).state for r in escalated] == ["abandoned", "abandoned", "escalated", "escalated"]
    assert Run.objects.get(id=outsider["id"]).state == "escalated"
    assert Approval.objects.get(id=approvals[0]).decided_by == f"user:{backlog.FLEET_EDITOR}"
    assert backlog.backlog_tidy(keep=2) == {"rejected": 0, "abandoned": 0}
    # the pages mark the demo's tidying as the demo's, never as a person's decision (issue 41)
    from django.urls import reverse

    from ledger import services
    from tests.factories import login
    oncall, person = login("oncall")
    services.run_abandon(run_id=escalated[2], user=person, reason="the runner image is gone for good")
    inbox = login("viewer")[0].get(reverse("ledger:approval_list")).content.decode()
    assert "data-demo-tidying" in inbox.split(f'id="decided-{approvals[0]}"')[1].split("</tr>")[0]
    tidied = oncall.get(reverse("ledger:run_detail", args=[escalated[0]])).content.decode()
    assert "data-demo-tidying" in tidied.split('data-kind="abandoned"')[1].split("</tr>")[0]
    by_person = oncall.get(reverse("ledger:run_detail", args=[escalated[2]])).content.decode()
    assert "data-demo-tidying" not in by_person and "the runner image is gone" in by_person


def test_the_fleet_stops_within_a_second_or_two_even_with_an_agent_busy():
    """`up`'s Ctrl-C stops the demo: an agent busy in a scenario (or long-polling a server that is stopping
    too) is terminated after the stop's grace, never waited out (issue 41: `up` took 11-13 s to stop)."""
    import multiprocessing
    import time

    from ledger.ops.demo.fleet import Fleet

    fleet = Fleet(url="http://127.0.0.1:9", agents={}, editor_token="", executors={})
    ctx = multiprocessing.get_context("spawn")
    fleet.tasks = ctx.Queue()
    busy = ctx.Process(target=time.sleep, args=(30,), daemon=True)
    busy.start()
    fleet.procs = [busy]
    started = time.monotonic()
    fleet.stop()
    assert not busy.is_alive() and time.monotonic() - started < 3
