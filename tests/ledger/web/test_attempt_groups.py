"""Attempts grouped (SPEC §15): ``group=attempts`` lists one row per attempt group (the runs of one intent
and input fingerprint), its latest run with the group's count, on GET /api/v1/runs/ and /runs/."""

import pytest
from django.urls import reverse

from tests.browser.scenarios import agent_driver, escalation_workflow
from tests.factories import assert_queries_flat, login, texts
from tests.ledger.web.test_run_desk import escalated, failing

pytestmark = pytest.mark.django_db


def test_api_lists_one_row_per_attempt_group_with_its_count():
    agent, failed, run = escalated()
    other = agent.trigger(intent="nightly", inputs={"intent": "nightly", "other": 1})
    lone = agent.trigger(intent="lone", inputs={"intent": "lone"})
    grouped = agent.client.get("/api/v1/runs/", {"group": "attempts"})
    assert grouped.status_code == 200, grouped.content
    rows = {r["id"]: r for r in grouped.json()["results"]}
    assert set(rows) == {run["id"], other["id"], lone["id"]}  # failed is grouped under run, its latest
    assert rows[run["id"]]["attempts"] == 2 and rows[other["id"]]["attempts"] == 1 and rows[lone["id"]]["attempts"] == 1
    plain = agent.client.get("/api/v1/runs/").json()["results"]
    assert {r["id"] for r in plain} == {run["id"], other["id"], lone["id"], failed["id"]}
    assert all("attempts" not in r for r in plain)
    # Other filters still apply to the groups' latest runs.
    escalated_only = agent.client.get("/api/v1/runs/", {"group": "attempts", "state": "escalated"}).json()["results"]
    assert [r["id"] for r in escalated_only] == [run["id"]]


def test_api_refuses_an_unknown_grouping():
    agent, _, _ = escalated()
    response = agent.client.get("/api/v1/runs/", {"group": "intent"})
    assert response.status_code == 400 and response.json()["code"] == "invalid_filter"
    assert "group" in response.json()["errors"]


def test_runs_page_groups_attempts_and_notes_an_unknown_grouping():
    _, failed, run = escalated()
    viewer, _ = login("viewer")
    html = texts(viewer.get(reverse("ledger:run_list"), {"group": "attempts"}))
    assert run["id"][:8] in html and failed["id"][:8] not in html and 'data-attempts="2"' in html
    assert "2 attempts" in html and "1 attempt group <span" in html
    plain = texts(viewer.get(reverse("ledger:run_list")))
    assert failed["id"][:8] in plain and "data-attempts" not in plain
    noted = texts(viewer.get(reverse("ledger:run_list"), {"group": "nope"}))
    assert "There is no group" in noted and failed["id"][:8] in noted


def test_grouped_runs_page_queries_are_flat():
    viewer, _ = login("viewer")
    agent = agent_driver(escalation_workflow(max_retries=10))

    def add_group(n):
        for _ in range(2):
            failing(agent, f"g{n}", "boom")

    assert_queries_flat(viewer, reverse("ledger:run_list") + "?group=attempts", add_group, rows=4)
