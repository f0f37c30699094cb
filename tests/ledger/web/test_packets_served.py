"""What the agent was told: each resume packet's facts, leads and left-out claims, on the run and claim pages."""

import pytest
from django.urls import reverse
from django.utils import timezone

from knowledge.models import PacketServed
from ledger.resume import resume_packet
from tests.factories import make_agent, make_operator, make_workflow
from tests.ledger.test_resume_packet import _claim, _run

pytestmark = pytest.mark.django_db
SPEC = {"in_scope": True, "sensitive": False, "words": 5, "age_days": 3}


def _served(system):
    now = timezone.now()
    owner, _ = make_operator("owner")
    agent_user, _ = make_agent(owner=owner)
    fact, _ = _claim(owner, {**SPEC, "fate": "active"}, now, system)
    lead, _ = _claim(owner, {**SPEC, "fate": "stale"}, now, system)
    revoked, _ = _claim(owner, {**SPEC, "fate": "revoked"}, now, system)
    run = _run(make_workflow(), agent_user, system)
    resume_packet(run=run, user=agent_user, now=now)
    resume_packet(run=run, user=agent_user, now=now)  # the same packet again: no second record
    return run, agent_user, fact, lead, revoked


def test_a_served_packet_records_facts_leads_and_left_out_once():
    run, agent_user, fact, lead, revoked = _served("served-sys")
    packet = PacketServed.objects.get(run_id=str(run.id))
    uses = {(c.key, c.use, c.reason) for c in packet.claims.all()}
    assert uses == {(fact, "fact", ""), (lead, "lead", "stale"), (revoked, "left_out", "revoked")}
    assert packet.served_to == f"agent:{agent_user.username}"


def test_run_page_and_claim_page_show_what_was_served(client, django_assert_max_num_queries):
    run, _, fact, lead, revoked = _served("served-page")
    viewer, _ = make_operator("viewer")
    client.force_login(viewer)
    with django_assert_max_num_queries(40):
        html = client.get(reverse("ledger:run_detail", args=[run.id])).content.decode()
    assert f'data-fact="{fact}"' in html and f'data-lead="{lead}"' in html and f'data-left-out="{revoked}"' in html
    with django_assert_max_num_queries(20):
        page = client.get(reverse("knowledge:claim_history", args=[fact])).content.decode()
    assert 'id="claim-served-in"' in page and str(run.id)[:8] in page
