"""What needs a human now, apart from history (issue 28): the on-call page's two sections, the
superseded mark, and the needs-a-human counts on the dashboard and on-call."""

import re

import pytest
from django.urls import reverse

from ledger import selectors
from ledger.models import Run
from tests.browser.scenarios import (
    agent_driver,
    approval_workflow,
    awaiting_approval_run,
    escalated_run,
    escalation_workflow,
    failed_run,
)
from tests.factories import login, make_operator

pytestmark = pytest.mark.django_db


def _completed_after_failure(agent, intent: str) -> tuple[dict, dict]:
    """(failed run, a later run of the same intent that resumed and completed)."""
    failed = failed_run(agent, intent)
    again = agent.trigger(intent=intent, inputs={"intent": intent})
    assert again["state"] in ("resume", "fresh"), again
    agent.pass_stage(again["id"], "test")
    done = agent.run(again["id"])
    assert done["state"] == "completed", done
    return failed, done


def _section(html: str, name: str) -> str:
    found = re.search(rf'<table data-section="{name}">(.*?)</table>', html, re.S)
    assert found, f"no {name} section"
    return found.group(1)


def test_oncall_puts_escalations_first_and_failed_runs_in_history_with_superseded_hidden():
    wf = escalation_workflow(max_retries=2)
    agent = agent_driver(wf)
    failed_one, later = _completed_after_failure(agent, "superseded-intent")
    lone_failure = failed_run(agent, "still-failing")
    escalation_agent = agent_driver(escalation_workflow())
    _, escalated = escalated_run(escalation_agent, "escalated-intent")
    assert selectors.with_superseded(Run.objects.filter(id=failed_one["id"])).get().superseded_by == \
        Run.objects.get(id=later["id"]).id
    oncall, _ = login("oncall")

    html = oncall.get(reverse("ledger:oncall")).content.decode()
    now, history = _section(html, "now"), _section(html, "history")
    assert escalated["id"] in now and lone_failure["id"] not in now and failed_one["id"] not in now
    assert lone_failure["id"] in history and "terminal; the next trigger decides" in history
    assert failed_one["id"] not in history  # superseded: hidden by default
    assert 'data-superseded="show"' in html

    shown = _section(oncall.get(reverse("ledger:oncall") + "?superseded=1").content.decode(), "history")
    row = re.search(rf'<tr id="oncall-{failed_one["id"]}".*?</tr>', shown, re.S).group(0)
    assert "data-superseded-mark" in row and f'href="/runs/{later["id"]}/"' in row and "which completed" in row
    other = re.search(rf'<tr id="oncall-{lone_failure["id"]}".*?</tr>', shown, re.S).group(0)
    assert "data-superseded-mark" not in other


def test_nothing_needs_oncall_says_so_while_history_stays():
    agent = agent_driver(escalation_workflow(max_retries=3))
    failure = failed_run(agent, "lonely")
    oncall, _ = login("oncall")
    html = oncall.get(reverse("ledger:oncall")).content.decode()
    assert "Nothing needs on-call now." in html and failure["id"] in _section(html, "history")


def test_needs_a_human_counts_on_the_dashboard_and_oncall():
    """Escalations, pending approvals (escalations are not counted twice) and claims to review."""
    make_operator("editor")
    escalation_agent = agent_driver(escalation_workflow())
    escalated_run(escalation_agent, "e-1")
    escalated_run(escalation_agent, "e-2")
    approval_agent = agent_driver(approval_workflow())
    awaiting_approval_run(approval_agent, "a-1")
    viewer, viewer_user = login("viewer")
    assert selectors.needs_human(user=viewer_user) == {
        "escalated": 2, "compensate": 0, "approvals": 1, "claims": 0}
    for url in (reverse("dashboard"), reverse("ledger:oncall")):
        html = viewer.get(url).content.decode()
        tiles = dict(re.findall(r'data-needs="(\w+)">\s*<div class="n">(\S+)</div>', html))
        assert tiles == {"escalated": "2", "compensate": "0", "approvals": "1", "claims": "0"}, url


def test_counts_past_the_cap_read_as_cap_plus(monkeypatch):
    monkeypatch.setattr(selectors, "COUNT_CAP", 1)
    agent = agent_driver(escalation_workflow())
    for n in range(3):
        escalated_run(agent, f"many-{n}")
    viewer, user = login("viewer")
    assert selectors.needs_human(user=user)["escalated"] == 2  # counted up to the cap and one more
    html = viewer.get(reverse("dashboard")).content.decode()
    assert re.search(r'data-needs="escalated">\s*<div class="n">1\+</div>', html)


def test_dashboard_draws_only_states_some_run_is_in():
    agent = agent_driver(escalation_workflow())
    escalated_run(agent, "tiles")
    viewer, _ = login("viewer")
    html = viewer.get(reverse("dashboard")).content.decode()
    drawn = set(re.findall(r'data-state-count="(\w+)"', html))
    assert drawn == {"failed", "escalated"}
    empty = re.search(r"No run is ([^<]*)\.</p>", html).group(1)
    assert "captured" in empty and "completed" in empty and "failed" not in empty
