"""Dashboard counts are for a window (SPEC §15): runs created in the last 24 h by default, ``?window=``
1h, 24h, 7d or 30d; each tile links to the runs it counts."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from ledger.models import Run
from tests.browser.scenarios import agent_driver, escalation_workflow
from tests.factories import login, texts

pytestmark = pytest.mark.django_db


def tile(html: str, state: str) -> str:
    start = html.index(f'data-state-count="{state}"')
    return html[html.rindex("<a", 0, start):html.index("</a>", start)]


def test_dashboard_counts_runs_of_the_window_not_all_time():
    agent = agent_driver(escalation_workflow())
    old = agent.trigger(intent="old", inputs={"intent": "old"})
    agent.trigger(intent="new", inputs={"intent": "new"})
    Run.objects.filter(id=old["id"]).update(created_at=timezone.now() - timedelta(days=2))
    viewer, _ = login("viewer")
    html = texts(viewer.get(reverse("dashboard")))
    state = Run.objects.get(id=old["id"]).state
    assert '<div class="n">1</div>' in tile(html, state) and "1 run in the last 24 h" in html
    week = texts(viewer.get(reverse("dashboard"), {"window": "7d"}))
    assert '<div class="n">2</div>' in tile(week, state) and "2 runs in the last 7 days" in week
    assert texts(viewer.get(reverse("dashboard"), {"window": "forever"})).count("in the last 24 h") >= 1


def test_a_tile_links_to_the_runs_it_counts():
    agent = agent_driver(escalation_workflow())
    run = agent.trigger(intent="new", inputs={"intent": "new"})
    viewer, _ = login("viewer")
    html = texts(viewer.get(reverse("dashboard")))
    state = Run.objects.get(id=run["id"]).state
    link = tile(html, state)
    href = link[link.index('href="') + 6:].split('"')[0].replace("&amp;", "&")
    assert f"state={state}" in href and "created_after=" in href
    listed = texts(viewer.get(href))
    assert run["id"][:8] in listed and "data-unknown-filter" not in listed
