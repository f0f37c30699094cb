"""/runs/compare/: two attempts side by side, input changes and effect keys, in a constant number of queries."""

import pytest
from django.urls import reverse

from tests.browser.scenarios import agent_driver, escalated_run, escalation_workflow
from tests.factories import HX, login, make_workflow, page_queries, texts
from tests.ledger.web.test_run_page import long_run

pytestmark = pytest.mark.django_db


def test_compare_two_attempts_side_by_side():
    failed, escalated = escalated_run(agent_driver(escalation_workflow()), "cmp")
    viewer, _ = login("viewer")
    url = f"{reverse('ledger:run_compare')}?a={failed['id']}&b={escalated['id']}"
    for extra in ({}, HX):
        html = texts(viewer.get(url, **extra))
        for section in ("compare-inputs", "compare-decisions", "compare-stages", "compare-effects",
                        "compare-checkpoints"):
            assert f'id="{section}"' in html
        assert "retry_budget_exhausted" in html and "no_checkpoint" in html
        assert 'class="differs"' in html and "Same inputs." in html
    assert "<html" not in texts(viewer.get(url, **HX))


def test_compare_shows_input_changes_and_effect_keys():
    wf = make_workflow(stages=["push"], effect_stages=["push"], approval_stages=[])
    agent = agent_driver(wf)
    a = agent.trigger(intent="i", inputs={"v": 1, "keep": True})
    agent.pass_stage(a["id"], "push", effect_stage=True)
    b = agent.trigger(intent="i", inputs={"v": 2, "new": "x"})
    viewer, _ = login("viewer")
    html = texts(viewer.get(reverse("ledger:run_compare"), {"a": a["id"], "b": b["id"]}))
    assert 'data-change="changed"' in html and 'data-change="added"' in html and 'data-change="removed"' in html
    assert "ref-push-" in html


def test_compare_without_ids_is_an_empty_form_and_takes_unique_prefixes():
    """No ids: the form (200); unknown or ambiguous ids: a form error, never a 4xx/5xx page; prefixes work."""
    viewer, _ = login("viewer")
    empty = viewer.get(reverse("ledger:run_compare"))
    assert empty.status_code == 200 and 'name="a"' in texts(empty) and 'data-error="a"' not in texts(empty)
    response = viewer.get(reverse("ledger:run_compare"), {"a": "00000000-0000-0000-0000-000000000000",
                                                          "b": "zz<>!"})
    assert response.status_code == 200 and 'data-error="a"' in texts(response) and 'data-error="b"' in texts(response)
    failed, escalated = escalated_run(agent_driver(escalation_workflow()), "pfx")
    ok = viewer.get(reverse("ledger:run_compare"), {"a": failed["id"][:8], "b": escalated["id"][:10]})
    assert ok.status_code == 200 and 'id="compare-body"' in texts(ok)


def test_compare_query_count_is_constant_in_events():
    viewer, _ = login("viewer")
    _, a1 = long_run(2, "c-small")
    _, b1 = long_run(2, "c-small2")
    _, a2 = long_run(12, "c-big")
    _, b2 = long_run(12, "c-big2")
    url = reverse("ledger:run_compare")
    assert (page_queries(viewer, url, {"a": a1["id"], "b": b1["id"]})
            == page_queries(viewer, url, {"a": a2["id"], "b": b2["id"]}))


def test_compare_shows_the_decision_each_run_ran_under_and_only_its_own_effects():
    """A failed attempt (A) and the next one (B), which deployed, then was rolled back (decided again,
    ``rolled_back``): B's column shows the decision it ran under and the later one apart; A's column
    never lists B's deploy."""
    from ledger import services
    from tests.ledger.web.test_rollback import _completed

    workflow = make_workflow(stages=["build", "deploy"], effect_stages=["deploy"], approval_stages=[])
    a, _ = services.run_trigger(workflow_slug=workflow.slug, inputs={"v": 1}, actor="agent:a")
    services.event_append(run_id=a.id, body={"stage": "build", "kind": "started"}, actor="agent:a")
    services.event_append(run_id=a.id, body={"stage": "build", "kind": "failed", "reason_code": "tests_red"},
                          actor="agent:a")
    b = _completed(workflow)
    ran_under = b.decision["reason_code"]
    oncall, user = login("oncall")
    services.run_rollback(run_id=b.id, user=user, to_stage="deploy", reason="bad deploy")
    html = texts(oncall.get(reverse("ledger:run_compare"), {"a": str(a.id), "b": str(b.id)}))
    decisions = html.split('id="compare-decisions"')[1].split("</section>")[0]
    reason_row = decisions.split("<td>reason_code</td>")[1].split("</tr>")[0]
    assert ran_under in reason_row and "rolled_back" not in reason_row
    assert "data-decided-again" in decisions and "rolled_back" in decisions.split("data-decided-again")[1]
    effects = html.split('id="compare-effects"')[1].split("</section>")[0]
    row = effects.split("<tbody>")[1].split("</tr>")[0]
    cells = row.split("<td")[2:]  # A's cell, B's cell (after the key)
    assert "ref-deploy" not in cells[0] and "—" in cells[0] and "ref-deploy" in cells[1]
