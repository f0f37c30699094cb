"""SPEC §16 usage and budgets: an event's ``usage`` checked and recorded (hashed), a run's totals as decimal
strings, the workflow's day kept by the append's own statement, per-run budgets escalating ``budget_exceeded``
after the event (or the whole batch), and the day budget's one ``budget_exhausted`` escalation (on both stores;
the concurrent triggers and the statement counts on PostgreSQL)."""

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from ledger import services
from ledger.domain.usage import UsageInvalid, budget_checked, spend_day, usage_checked
from ledger.models import Approval, BudgetEscalation, LedgerEvent, Run, WorkflowDaySpend
from tests.factories import client_for, make_agent, make_operator, make_workflow, unique
from tests.ledger.helpers import AgentDriver, race, raised

pytestmark = pytest.mark.django_db


def _driver(**budget):
    workflow = make_workflow(stages=["work", "ship"], effect_stages=[], approval_stages=[], budget=budget)
    return AgentDriver(client_for(make_agent()[1]), workflow.slug), workflow


def _working(driver, **trigger):
    run = driver.trigger(**trigger)
    driver.event(run["id"], "work", "started")
    return run


# ---------------------------------------------------------------- the rules (pure)

@pytest.mark.parametrize("given", [
    {"input_tokens": "12"}, {"output_tokens": -1}, {"input_tokens": True}, {"input_tokens": 1.0},
    {"cost_usd": "0.1234567"}, {"cost_usd": 0.1234567}, {"cost_usd": -0.5}, {"cost_usd": "-1"},
    {"cost_usd": "1e-3"}, {"cost_usd": " 1"}, {"cost_usd": "NaN"}, {"cost_usd": True}, {"cost_usd": None},
    {"model": "m" * 101}, {"model": ""}, {"model": 7}, {"tokens": 1}, "12", [1],
])
def test_what_is_no_usage(given):
    with pytest.raises(UsageInvalid):
        usage_checked(given)


def test_usage_as_recorded_money_as_the_digits_written():
    assert usage_checked(None) == {}
    assert usage_checked({"input_tokens": 0, "output_tokens": 12, "cost_usd": 0.1, "model": "m" * 100}) == {
        "input_tokens": 0, "output_tokens": 12, "cost_usd": "0.1", "model": "m" * 100}
    assert usage_checked({"cost_usd": "0.123456"})["cost_usd"] == "0.123456"
    assert usage_checked({"cost_usd": 1e-05})["cost_usd"] == "0.00001"  # (repr '1e-05': no exponent kept)
    assert usage_checked({"cost_usd": 3})["cost_usd"] == "3"


@pytest.mark.parametrize("given", [{"tokens_per_run": "10"}, {"tokens_per_run": -1}, {"cost_usd_per_run": "1.0000001"},
                                   {"cost_usd_per_day": [1]}, {"per_week": 1}, [1]])
def test_what_is_no_budget(given):
    with pytest.raises(UsageInvalid):
        budget_checked(given)


# ---------------------------------------------------------------- usage on events, totals on runs

@pytest.mark.parametrize("usage", [
    {"input_tokens": "12"}, {"output_tokens": -3}, {"cost_usd": "0.1234567"}, {"model": "m" * 101},
    {"cost_usd": 0.30000000000000004},  # a float's binary noise is 17 places: not an amount of at most 6
])
def test_an_event_with_invalid_usage_is_422_and_writes_nothing(usage):
    driver, _ = _driver()
    run = _working(driver)
    count = LedgerEvent.objects.filter(run_id=run["id"]).count()
    refused = driver.event(run["id"], "work", "succeeded", expect=422, usage=usage)
    assert refused["code"] == "invalid_usage", refused
    assert LedgerEvent.objects.filter(run_id=run["id"]).count() == count


def test_usage_is_recorded_on_the_event_hashed_and_the_run_shows_its_totals_as_decimal_strings():
    driver, workflow = _driver()
    run = _working(driver)
    first = driver.event(run["id"], "work", "succeeded",
                         usage={"input_tokens": 100, "output_tokens": 20, "cost_usd": 0.1, "model": "claude-x"})
    assert first["usage"] == {"input_tokens": 100, "output_tokens": 20, "cost_usd": "0.1", "model": "claude-x"}
    driver.event(run["id"], "ship", "started", usage={"cost_usd": 0.1})
    driver.event(run["id"], "ship", "succeeded", usage={"cost_usd": "0.1", "output_tokens": 5})
    body = driver.run(run["id"])
    # three floats 0.1 summed as floats would be 0.30000000000000004: the totals are decimals
    assert body["usage"] == {"input_tokens": 100, "output_tokens": 25, "cost_usd": "0.3"}
    assert body["state"] == "completed"
    assert services.chain_verify(run=Run.objects.get(id=run["id"]))["ok"]
    event = LedgerEvent.objects.get(run_id=run["id"], seq=first["seq"])
    event.usage = {**event.usage, "input_tokens": 1}  # the hash covers usage: a changed one breaks the chain
    assert services.event_compute_hash(event) != event.hash
    day = WorkflowDaySpend.objects.get(workflow=workflow, day=spend_day(timezone.now()))
    assert (day.input_tokens, day.output_tokens, day.cost_micro_usd) == (100, 25, 300_000)
    plain = driver.trigger(inputs={"other": 1}, intent=unique("plain"))
    assert plain["usage"] == {"input_tokens": 0, "output_tokens": 0, "cost_usd": "0"}
    assert LedgerEvent.objects.filter(run_id=plain["id"]).exclude(usage={}).count() == 0


# ---------------------------------------------------------------- per-run budgets

def test_the_event_that_takes_a_run_over_its_token_budget_is_recorded_then_the_run_escalates():
    driver, _ = _driver(tokens_per_run=100)
    run = _working(driver)
    driver.event(run["id"], "work", "proposed", usage={"input_tokens": 60, "output_tokens": 40})  # at, not over
    assert driver.run(run["id"])["state"] == "execute"
    over = driver.event(run["id"], "work", "proposed", usage={"output_tokens": 1})
    body = driver.run(run["id"])
    assert body["state"] == "escalated" and body["lease"] is None, body  # the lease ended
    moved = LedgerEvent.objects.get(run_id=run["id"], seq=over["seq"] + 1)
    assert (moved.kind, moved.reason_code, moved.data["cause"]) == ("transition", "budget_exceeded", "budget_exceeded")
    escalation = Approval.objects.get(run_id=run["id"], kind=Approval.Kind.ESCALATION, status="pending")
    assert "budget_exceeded" in escalation.action["summary"]
    assert driver.event(run["id"], "work", "succeeded", expect=409)["code"] in ("not_leased", "illegal_transition")


def test_a_cost_budget_and_a_batch_recorded_whole_before_the_run_escalates():
    driver, _ = _driver(cost_usd_per_run="0.50")
    run = _working(driver)
    batch = [{"client_event_id": f"b-{n}", "stage": "work", "kind": "proposed", "usage": {"cost_usd": "0.30"}}
             for n in range(3)]
    response = driver.client.post(f"/api/v1/runs/{run['id']}/events/", batch, format="json")
    assert response.status_code == 201, response.content
    events = list(LedgerEvent.objects.filter(run_id=run["id"]).order_by("seq"))
    proposed = [e for e in events if e.kind == "proposed"]
    assert len(proposed) == 3  # the second crossed: the third is recorded all the same
    after = events[events.index(proposed[-1]) + 1]
    assert (after.kind, after.reason_code) == ("transition", "budget_exceeded")
    assert driver.run(run["id"])["usage"]["cost_usd"] == "0.90"


def test_a_batch_refused_in_part_records_no_usage():
    driver, workflow = _driver(cost_usd_per_run="10")
    run = _working(driver)
    batch = [{"client_event_id": "ok", "stage": "work", "kind": "proposed", "usage": {"cost_usd": "1"}},
             {"client_event_id": "bad", "stage": "work", "kind": "proposed", "usage": {"input_tokens": "1"}}]
    refused = driver.client.post(f"/api/v1/runs/{run['id']}/events/", batch, format="json").json()
    assert (refused["code"], refused["index"]) == ("invalid_usage", 1)
    assert driver.run(run["id"])["usage"]["cost_usd"] == "0"
    assert not WorkflowDaySpend.objects.filter(workflow=workflow).exists()


# ---------------------------------------------------------------- the day budget

def _spent_day(**budget):
    """A workflow whose day budget a first run has spent."""
    driver, workflow = _driver(cost_usd_per_day="1.00", **budget)
    run = _working(driver, intent=unique("spender"))
    driver.event(run["id"], "work", "proposed", usage={"cost_usd": "1.00"})
    return driver, workflow


def test_a_spent_day_escalates_one_trigger_then_later_triggers_noop_and_a_retry_goes_ahead():
    driver, workflow = _spent_day()
    first = driver.trigger(intent=unique("a"))
    assert (first["state"], first["decision"]["reason_code"]) == ("escalated", "budget_exhausted")
    later = driver.trigger(intent=unique("b"))
    assert (later["state"], later["decision"]["outcome"], later["decision"]["reason_code"]) == (
        "noop", "noop", "budget_exhausted")
    assert Approval.objects.filter(run__workflow=workflow, kind=Approval.Kind.ESCALATION).count() == 1
    assert BudgetEscalation.objects.get(workflow=workflow).run_id == Run.objects.get(id=first["id"]).id
    oncall, _ = make_operator("oncall")
    retried = services.run_retry(run_id=first["id"], user=oncall)
    assert retried.state == "fresh", retried.decision  # a person's retry goes ahead while the day is spent
    assert driver.trigger(intent=unique("c"))["state"] == "noop"  # one escalation stood: the day stays spent


def test_below_the_day_budget_or_on_another_day_a_trigger_is_decided_as_before():
    driver, workflow = _driver(cost_usd_per_day="1.00")
    run = _working(driver, intent=unique("spender"))
    driver.event(run["id"], "work", "proposed", usage={"cost_usd": "0.999999"})
    assert driver.trigger(intent=unique("a"))["state"] == "fresh"
    yesterday = spend_day(timezone.now() - timedelta(days=1))
    WorkflowDaySpend.objects.create(workflow=workflow, day=yesterday, cost_micro_usd=50_000_000)
    assert driver.trigger(intent=unique("b"))["state"] == "fresh"  # the day turned: yesterday's spend is gone


def test_a_budget_change_needs_no_policy_bump_and_a_bad_one_is_422():
    owner, token = make_operator("owner")
    client = client_for(token)
    created = client.post("/api/v1/workflows/", {"slug": unique("wf"), "stages": ["work"], "policy_version": "1",
                                                 "budget": {"tokens_per_run": 10}}, format="json")
    assert created.status_code == 201, created.content
    slug = created.json()["slug"]
    changed = client.patch(f"/api/v1/workflows/{slug}/", {"budget": {"cost_usd_per_day": "2.5",
                                                                     "cost_usd_per_run": 0.25}}, format="json")
    assert changed.status_code == 200 and changed.json()["budget"] == {"cost_usd_per_day": "2.5",
                                                                        "cost_usd_per_run": 0.25}
    for bad in ({"tokens_per_run": "10"}, {"cost_usd_per_day": "1.1234567"}, {"weekly": 1}, [1]):
        refused = client.patch(f"/api/v1/workflows/{slug}/", {"budget": bad}, format="json")
        assert refused.status_code == 422 and refused.json()["code"] == "invalid_budget", (bad, refused.content)


# ---------------------------------------------------------------- PostgreSQL: concurrency and statements

@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_concurrent_triggers_over_a_spent_day_open_exactly_one_escalation():
    driver, workflow = _spent_day()
    for attempt in range(3):
        BudgetEscalation.objects.filter(workflow=workflow).delete()
        results = race(2, lambda i: services.run_trigger(workflow_slug=workflow.slug, inputs={"i": i},
                                                         intent=unique(f"race-{attempt}"), actor="agent:x")[0])
        assert not raised(results), results
        states = sorted(run.state for run in results)
        assert states == ["escalated", "noop"], states
        assert all(run.decision["reason_code"] == "budget_exhausted" for run in results)
        assert BudgetEscalation.objects.filter(workflow=workflow).count() == 1
    escalated = Run.objects.filter(workflow=workflow, state="escalated")
    assert Approval.objects.filter(run__in=escalated, kind=Approval.Kind.ESCALATION).count() == escalated.count() == 3


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_trigger_that_read_no_escalation_loses_its_claim_to_one_not_yet_committed(monkeypatch):
    """Held by the unique key, not by Python: the second trigger reads the day before the first commits (so it
    sees no escalation and tries to claim the day), waits on the first's uncommitted claim, and finds it taken."""
    from ledger.services import spend

    driver, workflow = _spent_day()
    claimed, claims = threading.Event(), []
    original = spend.day_escalation_claim

    def claim(**kwargs):
        won = original(**kwargs)
        claims.append(won)
        if won:
            claimed.set()
            time.sleep(0.5)  # the first holds its claim uncommitted while the second reads and claims
        return won

    monkeypatch.setattr(spend, "day_escalation_claim", claim)

    def trigger(i):
        if i:
            assert claimed.wait(10)
        return services.run_trigger(workflow_slug=workflow.slug, inputs={"i": i}, intent=f"claim-{i}",
                                    actor="agent:x")[0]

    first, second = race(2, trigger)
    assert (first.state, second.state) == ("escalated", "noop"), (first, second)
    assert claims == [True, False]  # the second read no escalation, claimed, and lost to the key
    assert BudgetEscalation.objects.get(workflow=workflow).run_id == first.id


def _statements(call) -> list[str]:
    with CaptureQueriesContext(connection) as captured:
        call()
    return [q["sql"] for q in captured.captured_queries]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_usage_adds_no_statement_to_the_append_nor_the_day_budget_to_the_trigger():
    agent, token = make_agent()
    workflow = make_workflow(stages=["work"], effect_stages=[], approval_stages=[],
                             budget={"tokens_per_run": 10_000, "cost_usd_per_day": "100"})
    client = client_for(token)
    run_id = client.post("/api/v1/runs/", {"workflow": workflow.slug, "inputs": {}}, format="json").json()["id"]
    assert client.post(f"/api/v1/runs/{run_id}/events/", {"stage": "work", "kind": "started"},
                       format="json").status_code == 201
    body = {"stage": "work", "kind": "proposed", "usage": {"input_tokens": 7, "output_tokens": 3, "cost_usd": "0.25"}}
    sent = _statements(lambda: client.post(f"/api/v1/runs/{run_id}/events/", body, format="json"))
    assert len(sent) == 3, sent  # the token, the run as read, the write (the event, the run's totals, the day)
    assert sent[-1].startswith("WITH u AS (UPDATE") and "ledger_workflowdayspend" in sent[-1]
    assert Run.objects.get(id=run_id).usage == {"input_tokens": 7, "output_tokens": 3, "cost_usd": "0.25"}
    assert WorkflowDaySpend.objects.get(workflow=workflow).cost_micro_usd == 250_000
    sent = _statements(lambda: services.run_trigger(workflow_slug=workflow.slug, inputs={}, intent="other",
                                                    actor="agent:a"))
    assert len(sent) == 5, sent  # BEGIN, the workflow locked with its goal, the reads (the day's too), insert, COMMIT
    assert "ledger_workflowdayspend" in sent[2] and "ledger_budgetescalation" in sent[2]
