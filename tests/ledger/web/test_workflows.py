"""The workflow pages: definition, schedule (next ticks in UTC), policy, history and runs."""

from datetime import datetime, timezone

import pytest
from django.urls import reverse

from ledger import services
from ledger.models import AuditEntry
from ledger.web.workflows import next_ticks
from tests.factories import HX, login, make_workflow, page_queries, texts

pytestmark = pytest.mark.django_db


def test_next_ticks_are_utc_and_follow_the_cron_line():
    now = datetime(2026, 12, 1, 10, 7, tzinfo=timezone.utc)  # a Tuesday
    assert next_ticks("*/15 * * * *", now=now)[:2] == [now.replace(minute=15), now.replace(minute=30)]
    daily = next_ticks("0 3 * * *", now=now)
    assert len(daily) == 5 and daily[0] == datetime(2026, 12, 2, 3, 0, tzinfo=timezone.utc)
    assert next_ticks("30 9 * * 1", now=now)[0] == datetime(2026, 12, 7, 9, 30, tzinfo=timezone.utc)  # Monday
    assert next_ticks("not a cron", now=now) == []


def test_workflow_pages_show_definition_schedule_policy_history_and_runs():
    wf = make_workflow(schedule="0 3 * * *")
    services.run_trigger(workflow_slug=wf.slug, inputs={}, intent="w")
    owner, user = login("owner")
    services.audit_record(user=user, action="policy_bump", outcome="done", target=wf.slug, reason="new gate",
                          data={"from": "1", "to": "2"})
    for extra in ({}, HX):
        listing = texts(owner.get(reverse("ledger:workflow_list"), **extra))
        assert f'data-workflow="{wf.slug}"' in listing
        html = texts(owner.get(reverse("ledger:workflow_detail", args=[wf.slug]), **extra))
        assert html.count("data-tick") == 5 and " UTC" in html
        assert "1 → 2" in html and "new gate" in html and ">w<" in html
    assert owner.get(reverse("ledger:workflow_detail", args=["missing"])).status_code == 404


def test_workflow_list_query_count_is_constant_in_runs():
    viewer, _ = login("viewer")
    wf = make_workflow()
    for n in range(2):
        services.run_trigger(workflow_slug=wf.slug, inputs={}, intent=f"wq-{n}")
    few = [page_queries(viewer, reverse(n, args=a)) for n, a in (("ledger:workflow_list", []),
                                                            ("ledger:workflow_detail", [wf.slug]))]
    for n in range(2, 10):
        services.run_trigger(workflow_slug=wf.slug, inputs={}, intent=f"wq-{n}")
        AuditEntry.objects.create(at=wf.created_at, actor="x", role="owner", action="policy_bump", outcome="done",
                                  target=wf.slug, data={"from": str(n), "to": str(n + 1)})
    assert [page_queries(viewer, reverse(n, args=a)) for n, a in (("ledger:workflow_list", []),
                                                             ("ledger:workflow_detail", [wf.slug]))] == few
