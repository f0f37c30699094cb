"""The run page is the on-call desk (SPEC §15): an escalated run's actions with their preview, the failure
that escalated it (the most recent failed attempt's, its text redacted), its lease line, its attempts."""

import pytest
from django.urls import reverse

from ledger.models import Run
from tests.browser.scenarios import agent_driver, escalation_workflow
from tests.factories import HX, login, page_queries, texts

pytestmark = pytest.mark.django_db

AWS = "AKIAIOSFODNN7EXAMPLE"


def failing(agent, intent, error, stage="build", inputs=None):
    run = agent.trigger(intent=intent, inputs=inputs or {"intent": intent})
    agent.event(run["id"], stage, "started")
    agent.event(run["id"], stage, "failed", reason_code="tests_red", data={"error": error})
    return run


def escalated(error="3 tests failed: test_login", max_retries=1):
    agent = agent_driver(escalation_workflow(max_retries=max_retries))
    failed = failing(agent, "nightly", error)
    run = agent.trigger(intent="nightly", inputs={"intent": "nightly"})
    assert run["state"] == "escalated" and run["decision"]["reason_code"] == "retry_budget_exhausted", run
    return agent, failed, run


def desk_of(html: str) -> str:
    start = html.index('id="oncall-desk"')
    return html[start:html.index("</section>", start)]


def test_escalated_run_page_names_the_failure_of_the_failed_attempt_redacted():
    _, failed, run = escalated(f"3 tests failed; leaked {AWS} and password=hunter2")
    oncall, _ = login("oncall")
    html = texts(oncall.get(reverse("ledger:run_detail", args=[run["id"]])))
    desk = desk_of(html)
    assert "data-failure-stage>build<" in desk and "tests_red" in desk
    assert "3 tests failed; leaked AKIA[redacted]" in desk and AWS not in html and "hunter2" not in html
    assert f'data-failure-run="{failed["id"]}"' in desk and "retry_budget_exhausted" in desk
    # The failed attempt's own page shows the text on its failed event too.
    own = texts(oncall.get(reverse("ledger:run_detail", args=[failed["id"]])))
    assert "data-event-error>3 tests failed; leaked AKIA[redacted]" in own and "hunter2" not in own


def test_the_failure_text_is_cut_at_2000_characters_and_the_newest_failure_wins():
    agent = agent_driver(escalation_workflow(max_retries=2))
    failing(agent, "nightly", "old failure")
    failing(agent, "nightly", "x" * 1990 + "TAIL-BEYOND-2000-CHARS")
    run = agent.trigger(intent="nightly", inputs={"intent": "nightly"})
    assert run["state"] == "escalated", run
    viewer, _ = login("viewer")
    desk = desk_of(texts(viewer.get(reverse("ledger:run_detail", args=[run["id"]]))))
    assert "x" * 1990 + "TAIL-BEYON" in desk and "TAIL-BEYOND" not in desk and "old failure" not in desk


def test_escalated_run_page_offers_the_actions_with_the_oncall_preview_and_waits_for_oncall():
    _, _, run = escalated()
    oncall, _ = login("oncall")
    html = texts(oncall.get(reverse("ledger:run_detail", args=[run["id"]])))
    desk = desk_of(html)
    assert 'data-desk-action="retry" data-applies="yes"' in desk and "data-outcome>" in desk
    assert 'data-desk-action="abandon" data-applies="yes"' in desk
    assert 'data-desk-action="compensate" data-applies="no"' in desk and "nothing to compensate" in desk
    assert f'formaction="{reverse("ledger:run_retry", args=[run["id"]])}"' in desk
    assert f'formaction="{reverse("ledger:run_abandon", args=[run["id"]])}"' in desk
    assert f'formaction="{reverse("ledger:run_compensate", args=[run["id"]])}"' not in desk
    lease = html[html.index('id="lease-panel"'):]
    assert "not leased: waits for on-call" in lease.split("</dd>")[0]
    # A viewer sees the failure and the preview, not the buttons.
    viewer, _ = login("viewer")
    plain = desk_of(texts(viewer.get(reverse("ledger:run_detail", args=[run["id"]]))))
    assert "data-failure-stage" in plain and 'formaction="' not in plain


def test_retry_from_the_run_page_comes_back_to_it():
    _, _, run = escalated()
    oncall, _ = login("oncall")
    url = reverse("ledger:run_detail", args=[run["id"]])
    assert 'data-action="retry"' in desk_of(texts(oncall.get(url)))
    response = oncall.post(reverse("ledger:run_retry", args=[run["id"]]), {"next": url, "reason": "flaky CI"})
    assert response.status_code == 302 and response["Location"] == url
    assert Run.objects.get(id=run["id"]).state != "escalated"
    html = texts(oncall.get(url))
    assert 'id="oncall-desk"' not in html and "Retry: " in html


def test_live_refresh_keeps_the_desk_as_it_was_and_runs_no_preview():
    _, _, run = escalated()
    oncall, _ = login("oncall")
    url = reverse("ledger:run_detail", args=[run["id"]])
    fragment = texts(oncall.get(url, **HX))
    assert '<section id="oncall-desk"' in fragment and 'hx-preserve="true"' in fragment
    assert "data-desk-action" not in fragment  # htmx keeps the page's desk (a reason being typed stays)


def test_other_runs_have_no_desk_and_keep_their_lease_line():
    agent = agent_driver(escalation_workflow())
    run = agent.trigger(intent="fresh", inputs={"intent": "fresh"})
    viewer, _ = login("viewer")
    html = texts(viewer.get(reverse("ledger:run_detail", args=[run["id"]])))
    assert 'id="oncall-desk"' not in html and "waits for on-call" not in html


def test_attempts_are_of_one_intent_and_fingerprint_newest_first():
    agent, failed, run = escalated()
    other = agent.trigger(intent="nightly", inputs={"intent": "nightly", "other": 1})  # other inputs: not an attempt
    viewer, _ = login("viewer")
    html = texts(viewer.get(reverse("ledger:run_detail", args=[run["id"]])))
    panel = html[html.index('id="attempts-panel"'):html.index('id="packets-panel"')]
    listed = panel[panel.index("<ol"):]
    assert "Attempts of this intent (2)" in panel and other["id"][:8] not in panel
    assert listed.index(run["id"][:8]) < listed.index(failed["id"][:8])  # newest first
    assert f"?a={failed['id']}&amp;b={run['id']}" in panel  # compare with the previous attempt


def test_a_run_is_among_its_attempts_even_beyond_the_newest_fifty():
    from ledger import attempt_selectors

    agent = agent_driver(escalation_workflow(max_retries=100))
    first = failing(agent, "many", "boom")
    for _ in range(3):
        failing(agent, "many", "boom")
    attempts = attempt_selectors.run_attempts(run=Run.objects.get(id=first["id"]), limit=2)
    assert [str(a.id) for a in attempts][-1] == first["id"] and len(attempts) == 3


def escalated_after(failures: int) -> dict:
    """An escalated run whose intent failed ``failures`` times first (retry budget ``failures``)."""
    agent = agent_driver(escalation_workflow(max_retries=failures))
    for _ in range(failures):
        failing(agent, "q", "boom")
    run = agent.trigger(intent="q", inputs={"intent": "q"})
    assert run["state"] == "escalated", run
    return run


def test_desk_page_queries_do_not_grow_with_attempts():
    oncall, _ = login("oncall")
    one, five = escalated_after(1), escalated_after(5)
    url = lambda run: reverse("ledger:run_detail", args=[run["id"]])  # noqa: E731
    assert page_queries(oncall, url(one)) == page_queries(oncall, url(five))


def test_oncall_rows_name_the_failure_that_escalated_each_in_flat_queries():
    from tests.factories import assert_queries_flat

    _, _, run = escalated(f"3 tests failed; key {AWS}")
    oncall, _ = login("oncall")
    html = texts(oncall.get(reverse("ledger:oncall")))
    row = html[html.index(f'id="oncall-{run["id"]}"'):].split("</tr>")[0]
    assert "data-row-failure>failed at build" in row and "tests_red" in row
    assert "3 tests failed; key AKIA[redacted]" in row and AWS not in html
    from ledger import attempt_selectors

    stored = Run.objects.get(id=run["id"])
    assert attempt_selectors.with_failures([stored])[0].failure == attempt_selectors.escalating_failure(run=stored)

    def add_escalation(n):
        agent = agent_driver(escalation_workflow())
        failing(agent, f"e{n}", "boom")
        assert agent.trigger(intent=f"e{n}", inputs={"intent": f"e{n}"})["state"] == "escalated"

    assert_queries_flat(oncall, reverse("ledger:oncall"), add_escalation, rows=3)
