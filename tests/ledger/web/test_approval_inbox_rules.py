"""The approvals inbox under a workflow's approval_rules (SPEC §17): each request shows its votes and who may
still decide it; the buttons only for its approvers (through {% may %}); the same queries for one row as for many."""

import pytest
from django.urls import reverse

from ledger.models import Approval, ApproverGroup
from tests.browser.scenarios import agent_driver, approval_workflow, awaiting_approval_run
from tests.factories import HX, assert_queries_flat, make_operator, page_client, texts

pytestmark = pytest.mark.django_db

RULES = {"deploy": {"approvers": ["user:alice", "user:bob", "group:release"], "quorum": 2}}


def _row(html: str, approval_id) -> str:
    return html.split(f'id="approval-{approval_id}"')[1].split("</tr>")[0]


@pytest.fixture
def desk():
    people = {name: make_operator("editor", name=name)[0] for name in ("alice", "bob", "carol", "dave")}
    people["vera"] = make_operator("viewer", name="vera")[0]
    ApproverGroup.objects.create(name="release").members.add(people["dave"], people["vera"])
    agent = agent_driver(approval_workflow(approval_rules=RULES))
    return people, agent


def test_a_vote_shows_in_the_row_with_who_may_still_decide(desk):
    people, agent = desk
    _, approval = awaiting_approval_run(agent, "post-a")
    alice = page_client(people["alice"])
    voted = alice.post(reverse("ledger:approval_approve", args=[approval["id"]]), {"reason": "fine by me"}, **HX)
    assert voted.status_code == 200, voted.content
    row = texts(voted)
    assert 'data-status="pending"' in row and 'data-votes="1"' in row and "1 of 2" in row
    assert "user:alice" in row and "fine by me" in row
    assert "data-voted" in row and 'data-action="approve"' not in row  # her vote is in
    assert 'data-action="reject"' in row  # she may still reject
    assert Approval.objects.get(id=approval["id"]).votes[0]["by"] == "user:alice"

    bob_row = _row(texts(page_client(people["bob"]).get(reverse("ledger:approval_list"))), approval["id"])
    deciders = bob_row.split("data-deciders>")[1].split("</div>")[0]
    assert deciders == "may still decide: bob, dave"  # not alice (voted), carol (no approver), vera (no editor)
    assert 'data-action="approve"' in bob_row and "data-actionable" in bob_row.split(">")[0]
    assert "approvers: user:alice, user:bob, group:release" in bob_row

    approved = page_client(people["dave"]).post(reverse("ledger:approval_approve", args=[approval["id"]]))
    assert approved.status_code == 302
    assert Approval.objects.get(id=approval["id"]).status == "approved"


def test_the_buttons_only_for_the_requests_approvers(desk):
    people, agent = desk
    _, approval = awaiting_approval_run(agent, "post-a")
    for name, may in (("bob", True), ("dave", True), ("carol", False), ("vera", False)):
        html = texts(page_client(people[name]).get(reverse("ledger:approval_list")))
        row = _row(html, approval["id"])
        assert ('data-action="approve"' in row) is may, name
        assert ('data-action="reject"' in row) is may, name
    refused = page_client(people["carol"]).post(reverse("ledger:approval_approve", args=[approval["id"]]), **HX)
    assert refused.status_code == 403 and Approval.objects.get(id=approval["id"]).votes == []


def test_the_inbox_reads_the_same_with_one_request_as_with_many(desk):
    people, agent = desk
    dave = page_client(people["dave"])  # a group approver: the groups and the deciders, read once

    def add_row(n):
        awaiting_approval_run(agent, f"post-{n}")

    assert assert_queries_flat(dave, reverse("ledger:approval_list"), add_row, 4) <= 20
    html = texts(dave.get(reverse("ledger:approval_list")))
    assert html.count('data-action="approve"') == 4 and html.count("may still decide: alice, bob") == 4
