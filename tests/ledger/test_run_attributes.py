"""Run attributes (SPEC §15): on the trigger and by ``attributes_set``, kept in the ledger, filtered with
``attr.<key>=<value>`` (on both stores)."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from ledger import services
from ledger.domain.attributes import AttributesInvalid, attributes_checked, attributes_merged, matching_values
from ledger.models import LedgerEvent, Run
from ledger.store import store
from tests.factories import client_for, make_agent, make_workflow, unique
from tests.ledger.helpers import AgentDriver

pytestmark = pytest.mark.django_db


@pytest.fixture
def driver():
    workflow = make_workflow(stages=["build", "push"], effect_stages=["push"], approval_stages=[])
    return AgentDriver(client_for(make_agent()[1]), workflow.slug)


# ---------------------------------------------------------------- the rule (pure)

@pytest.mark.parametrize("given", [
    {f"k{i}": i for i in range(17)},
    {"Team": "x"}, {"1team": "x"}, {"team-a": "x"}, {"k" * 41: "x"},
    {"team": "x" * 201}, {"ratio": 0.5}, {"when": "2026-01-01T00:00:00"}, {"when": "2026-02-30T00:00:00Z"},
    {"list": [1]}, {"obj": {"a": 1}}, {"big": 2 ** 63}, "team=x", [1],
])
def test_what_is_no_attributes_object(given):
    with pytest.raises(AttributesInvalid):
        attributes_checked(given)


def test_the_values_an_attributes_object_may_hold():
    stored = attributes_checked({"team": "x" * 200, "tier": 2, "on": False, "due": "2026-01-01T01:00:00+01:00",
                                 "note": "2026-01-01 is a date, a string"})
    assert stored == {"team": "x" * 200, "tier": 2, "on": False, "due": "2026-01-01T00:00:00Z",
                      "note": "2026-01-01 is a date, a string"}


def test_a_null_removes_a_key_and_sixteen_count_the_merged_attributes():
    current = {f"k{i}": i for i in range(16)}
    assert attributes_merged(current, {"k0": None, "k16": "new"}) == {**{f"k{i}": i for i in range(1, 16)}, "k16": "new"}
    with pytest.raises(AttributesInvalid):
        attributes_merged(current, {"k16": "one too many"})


def test_a_query_value_matches_the_integer_the_boolean_and_the_string():
    assert matching_values("2") == (2, "2")
    assert matching_values("true") == (True, "true")
    assert matching_values("02") == ("02",)
    assert matching_values("2026-01-01T01:00:00+01:00") == ("2026-01-01T00:00:00Z",)
    assert matching_values("infra") == ("infra",)


# ---------------------------------------------------------------- trigger

@pytest.mark.parametrize("attributes", [
    {f"k{i}": "v" for i in range(17)}, {"Bad": 1}, {"team": "x" * 201}, {"ratio": 1.5},
    {"due": "2026-01-01T00:00:00"}, "team",
])
def test_a_trigger_with_bad_attributes_is_422_and_writes_nothing(driver, attributes):
    before = Run.objects.count()
    refused = driver.trigger(attributes=attributes, intent=unique("bad"), expect=422)
    assert refused["code"] == "invalid_attributes"
    assert Run.objects.count() == before


def test_a_trigger_carries_its_attributes_which_change_no_fingerprint_nor_decision(driver):
    plain = driver.trigger(intent=unique("plain"), inputs={"v": 1})
    intent = unique("labelled")
    labelled = driver.trigger(intent=intent, inputs={"v": 1}, attributes={"team": "infra", "tier": 2, "hot": True})
    assert labelled["attributes"] == {"team": "infra", "tier": 2, "hot": True}
    assert driver.run(labelled["id"])["attributes"] == {"team": "infra", "tier": 2, "hot": True}
    same = services.input_fingerprint(workflow_slug=driver.workflow, intent=intent, inputs={"v": 1},
                                      policy_version="1")
    assert labelled["input_fingerprint"] == same
    assert {k: v for k, v in labelled["decision"].items()} == {k: v for k, v in plain["decision"].items()}
    first = LedgerEvent.objects.filter(run_id=labelled["id"]).order_by("seq").first()
    assert (first.kind, first.data) == ("attributes_set", {"attributes": {"team": "infra", "tier": 2, "hot": True}})
    assert services.chain_verify(run=Run.objects.get(id=labelled["id"]))["ok"]


def test_a_duplicate_trigger_answers_the_run_with_its_attributes_as_they_are(driver):
    key = unique("key")
    first = driver.trigger(trigger_key=key, attributes={"team": "infra"})
    driver.event(first["id"], "build", "attributes_set", data={"attributes": {"team": "web", "tier": 3}})
    again = driver.trigger(trigger_key=key, attributes={"team": "other"})
    assert again["duplicate"] is True and again["id"] == first["id"]
    assert again["attributes"] == {"team": "web", "tier": 3}
    refused = driver.trigger(trigger_key=key, attributes={"team": 1.5}, expect=422)  # checked before the lookup
    assert refused["code"] == "invalid_attributes"


# ---------------------------------------------------------------- attributes_set

def test_the_holder_sets_changes_and_removes_attributes_and_moves_nothing(driver):
    run = driver.trigger(attributes={"team": "infra", "tier": 1})
    state, stage = run["state"], run["current_stage"]
    event = driver.event(run["id"], stage, "attributes_set", data={"attributes": {"tier": 2, "team": None, "ok": True}})
    assert event["kind"] == "attributes_set" and event["idempotency_key"] == ""
    after = driver.run(run["id"])
    assert after["attributes"] == {"tier": 2, "ok": True}
    assert (after["state"], after["current_stage"]) == (state, stage)
    driver.pass_stage(run["id"], "build")  # the run goes on as before
    assert driver.run(run["id"])["attributes"] == {"tier": 2, "ok": True}


def test_attributes_set_is_refused_off_the_current_stage_and_past_sixteen_keys(driver):
    run = driver.trigger(attributes={f"k{i}": i for i in range(15)})
    off = driver.event(run["id"], "push", "attributes_set", data={"attributes": {"a": 1}}, expect=409)
    assert off["code"] == "illegal_transition"
    bad = driver.event(run["id"], "build", "attributes_set", data={"attributes": {"a": 1, "b": 2}}, expect=422)
    assert bad["code"] == "invalid_attributes"
    for data in ({"attributes": {"a": 0.5}}, {"attributes": "a"}, {}):
        assert driver.event(run["id"], "build", "attributes_set", data=data, expect=422)["code"] == "invalid_attributes"
    driver.event(run["id"], "build", "attributes_set", data={"attributes": {"k0": None, "a": 1, "b": 2}})
    assert len(driver.run(run["id"])["attributes"]) == 16
    assert LedgerEvent.objects.filter(run_id=run["id"], kind="attributes_set").count() == 2  # trigger's and one


def test_attributes_set_by_an_agent_not_holding_the_lease_is_refused(driver):
    run = driver.trigger(attributes={"team": "infra"})
    other = AgentDriver(client_for(make_agent()[1]), driver.workflow)
    refused = other.event(run["id"], "build", "attributes_set", data={"attributes": {"team": "x"}}, expect=409)
    assert refused["code"] == "lease_held"
    assert driver.run(run["id"])["attributes"] == {"team": "infra"}


# ---------------------------------------------------------------- the filter

def _listed(driver, query: str) -> set[str]:
    response = driver.client.get(f"/api/v1/runs/?workflow={driver.workflow}&{query}")
    assert response.status_code == 200, response.content
    return {run["id"] for run in response.json()["results"]}


def test_attr_filters_compare_integers_booleans_and_strings_and_repeated_keys_and(driver):
    intents = [unique(f"f{i}") for i in range(4)]
    first_intent, intents = intents[0], iter(intents)
    int_two = driver.trigger(intent=next(intents), attributes={"tier": 2, "hot": True, "team": "infra"})["id"]
    text_two = driver.trigger(intent=next(intents), attributes={"tier": "2", "hot": "true", "team": "web"})["id"]
    one = driver.trigger(intent=next(intents), attributes={"tier": 1, "hot": False, "team": "infra"})["id"]
    bare = driver.trigger(intent=next(intents))["id"]
    assert _listed(driver, "attr.tier=2") == {int_two, text_two}
    assert _listed(driver, "attr.hot=true") == {int_two, text_two}
    assert _listed(driver, "attr.hot=false") == {one}
    assert _listed(driver, "attr.tier=1") == {one}  # 1 is not true
    assert _listed(driver, "attr.team=infra") == {int_two, one}
    assert _listed(driver, "attr.team=infra&attr.tier=2") == {int_two}
    assert _listed(driver, "attr.team=infra&attr.team=web") == set()
    assert _listed(driver, "attr.nothing=x") == set()
    assert _listed(driver, "") == {int_two, text_two, one, bare}
    assert _listed(driver, f"attr.tier=2&intent={first_intent}") == {int_two}  # beside the other filters


def test_a_time_matches_its_instant_in_any_offset(driver):
    run = driver.trigger(intent=unique("t"), attributes={"due": "2026-03-01T10:00:00+02:00"})
    assert run["attributes"] == {"due": "2026-03-01T08:00:00Z"}
    assert _listed(driver, "attr.due=2026-03-01T08:00:00Z") == {run["id"]}
    assert _listed(driver, "attr.due=2026-03-01T09:00:00%2B01:00") == {run["id"]}


@pytest.mark.parametrize("query", ["attr.Bad=1", "attr.=1", f"attr.team={'x' * 201}",
                                   "&".join(f"attr.k{i}=1" for i in range(17))])
def test_an_attr_filter_that_does_not_parse_is_400(driver, query):
    response = driver.client.get(f"/api/v1/runs/?{query}")
    assert response.status_code == 400 and response.json()["code"] == "invalid_filter"


def test_the_filter_follows_attributes_set(driver):
    run = driver.trigger(intent=unique("m"), attributes={"team": "infra"})
    assert _listed(driver, "attr.team=infra") == {run["id"]}
    driver.event(run["id"], "build", "attributes_set", data={"attributes": {"team": "web"}})
    assert _listed(driver, "attr.team=infra") == set()
    assert _listed(driver, "attr.team=web") == {run["id"]}


# ---------------------------------------------------------------- no round trip added

def _sent(call) -> list[str]:
    with CaptureQueriesContext(connection) as captured:
        call()
    return [q["sql"] for q in captured.captured_queries]


def test_attributes_add_no_statement_to_a_trigger_nor_to_an_append():
    wf = make_workflow(stages=["work", "ship"], effect_stages=[], approval_stages=[])
    plain = _sent(lambda: services.run_trigger(workflow_slug=wf.slug, inputs={}, intent="a", actor="agent:a"))
    labelled = _sent(lambda: services.run_trigger(workflow_slug=wf.slug, inputs={}, intent="b", actor="agent:a",
                                                  attributes={"team": "infra", "tier": 2}))
    assert len(labelled) == len(plain), (plain, labelled)
    run = Run.objects.get(workflow=wf, intent="b")
    services.event_append(run_id=run.id, body={"stage": "work", "kind": "started"}, actor="agent:a")
    proposed = _sent(lambda: services.event_append(run_id=run.id, body={"stage": "work", "kind": "proposed"},
                                                   actor="agent:a"))
    labelled = _sent(lambda: services.event_append(
        run_id=run.id, body={"stage": "work", "kind": "attributes_set", "data": {"attributes": {"tier": 3}}},
        actor="agent:a"))
    assert len(labelled) == len(proposed), (proposed, labelled)
    assert Run.objects.get(id=run.id).attributes == {"team": "infra", "tier": 3}


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_on_postgresql_the_trigger_stays_five_statements_and_attributes_set_one():
    wf = make_workflow(stages=["work"], effect_stages=[], approval_stages=[])
    sent = _sent(lambda: services.run_trigger(workflow_slug=wf.slug, inputs={}, intent="x", actor="agent:a",
                                              attributes={"team": "infra"}))
    assert len(sent) == 5, sent  # BEGIN, the workflow with the lock and goal, the reads, the insert, COMMIT
    run = Run.objects.get(workflow=wf, intent="x")
    services.event_append(run_id=run.id, body={"stage": "work", "kind": "started"}, actor="agent:a")
    peeked = store().run_peek(run.id)
    sent = _sent(lambda: services.event_append(
        run_id=run.id, body={"stage": "work", "kind": "attributes_set", "data": {"attributes": {"team": None}}},
        actor="agent:a", run=peeked))
    assert len(sent) == 1 and sent[0].startswith("WITH u AS (UPDATE") and '"attributes" = ' in sent[0], sent
    assert Run.objects.get(id=run.id).attributes == {}
