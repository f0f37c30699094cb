"""SPEC §15 on the pages: /agents/ shows owners and on-call the fleet (last request, runs held, leases and refusals
of the last hour, the token's state) in a constant number of queries, linked from the menu for them only; an
owner revokes an agent's token there (a POST with a reason, audited), on-call cannot."""

import pytest
from django.urls import reverse

from ledger.models import ApiToken, AuditEntry
from tests.factories import HX, assert_queries_flat, client_for, login, make_agent, make_workflow, texts
from tests.ledger.helpers import AgentDriver

pytestmark = pytest.mark.django_db

URL = "/agents/"


def _busy_agent(wf, intent):
    """An agent that holds a run (leased by its trigger) and had one request refused."""
    user, token = make_agent()
    agent = AgentDriver(client_for(token), wf.slug)
    run_id = agent.trigger(intent=intent)["id"]
    agent.event(run_id, "work", "succeeded", expect=409)
    return user, token, run_id


def test_the_page_shows_each_agents_figures_plain_and_as_a_fragment():
    wf = make_workflow(stages=["work"], effect_stages=[], approval_stages=[])
    user, _, run_id = _busy_agent(wf, "one")
    idle, _ = make_agent()
    client, _ = login("oncall")
    html = texts(client.get(URL))
    row = html[html.index(f'data-agent="{user.username}"'):]
    row = row[:row.index("</tr>")]
    assert 'data-token="active"' in row and 'data-runs-held="1"' in row and 'data-refusals="1"' in row
    assert reverse("ledger:run_detail", args=[run_id]) in row and "data-leases>1</td>" in row
    assert "never" in html[html.index(f'data-agent="{idle.username}"'):]
    assert 'data-action="revoke"' not in html  # on-call reads, only an owner revokes
    assert f'href="{reverse("ledger:agent_list")}"' in html  # the menu's link
    fragment = texts(client.get(URL, **HX))
    assert 'id="fleet-table"' in fragment and "<html" not in fragment and user.username in fragment


@pytest.mark.parametrize("role, status", [("owner", 200), ("oncall", 200), ("editor", 403), ("viewer", 403)])
def test_who_sees_the_fleet_and_its_menu_link(role, status):
    client, _ = login(role)
    assert client.get(URL).status_code == status
    menu = texts(client.get(reverse("ledger:run_list")))
    assert (f'href="{reverse("ledger:agent_list")}"' in menu) == (status == 200)


def test_the_page_reads_in_a_constant_number_of_queries():
    wf = make_workflow(stages=["work"], effect_stages=[], approval_stages=[])
    client, _ = login("owner")
    count = assert_queries_flat(client, URL, lambda n: _busy_agent(wf, f"i-{n}"), rows=10)
    assert count <= 10, count


def test_an_owner_revokes_from_the_page_with_a_reason_and_the_agent_is_then_refused():
    wf = make_workflow(stages=["work"], effect_stages=[], approval_stages=[])
    user, token, _ = _busy_agent(wf, "one")
    client, owner = login("owner")
    html = texts(client.get(URL))
    assert f'action="{reverse("ledger:agent_revoke", args=[user.username])}"' in html and "hx-confirm" in html
    url = reverse("ledger:agent_revoke", args=[user.username])
    blank = client.post(url, {"reason": "  "}, **HX)
    assert blank.status_code == 422 and ApiToken.objects.get(user=user).revoked_at is None
    row = client.post(url, {"reason": "compromised"}, **HX)
    assert row.status_code == 200 and 'data-token="revoked"' in texts(row) and 'data-action="revoke"' not in texts(row)
    entry = AuditEntry.objects.get(action="token_revoke")
    assert (entry.actor, entry.reason) == (f"user:{owner.username}", "compromised")
    answer = client_for(token).get(f"/api/v1/workflows/{wf.slug}/")
    assert answer.status_code == 401 and answer.json()["code"] == "authentication_failed"
    again = client.post(url, {"reason": "again"})
    assert again.status_code == 302 and AuditEntry.objects.filter(action="token_revoke").count() == 1


def test_a_plain_revoke_redirects_with_its_message_and_on_call_is_refused():
    user, _ = make_agent()
    url = reverse("ledger:agent_revoke", args=[user.username])
    oncall, _ = login("oncall")
    assert oncall.post(url, {"reason": "x"}).status_code == 403
    assert ApiToken.objects.get(user=user).revoked_at is None
    owner, _ = login("owner")
    done = owner.post(url, {"reason": "retired"}, follow=True)
    assert done.redirect_chain[-1][0] == URL and f"{user.username}&#x27;s token is revoked" in texts(done)
    assert ApiToken.objects.get(user=user).revoked_at is not None
