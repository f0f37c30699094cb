"""A workflow page shows its recent runs × stages (SPEC §15): each cell the stage's status and duration,
the same as the run page's, read in a constant number of queries."""

import pytest
from django.urls import reverse
from django.utils import timezone

from ledger import selectors, stage_selectors
from ledger.models import Run, Workflow
from ledger.web import drawing
from tests.browser.scenarios import agent_driver, approval_workflow, awaiting_approval_run, escalation_workflow
from tests.factories import assert_queries_flat, login, texts
from tests.ledger.web.test_run_desk import failing

pytestmark = pytest.mark.django_db


def test_workflow_page_grid_has_each_runs_stage_status_and_duration():
    wf = escalation_workflow(max_retries=5)
    agent = agent_driver(wf)
    failed = failing(agent, "red", "boom")  # build failed
    done = agent.trigger(intent="green", inputs={"intent": "green"})
    agent.pass_stage(done["id"], "build")
    agent.event(done["id"], "test", "started")  # test running
    viewer, _ = login("viewer")
    html = texts(viewer.get(reverse("ledger:workflow_detail", args=[wf.slug])))
    grid = html[html.index('data-section="stage-grid"'):]
    grid = grid[:grid.index("</table>")]
    assert '<th data-stage="build">build</th>' in grid and '<th data-stage="test">test</th>' in grid
    row = lambda run: grid[grid.index(f'data-run="{run["id"]}"'):].split("</tr>")[0]  # noqa: E731
    assert 'data-cell="build" data-status="failed"' in row(failed)
    assert 'data-cell="test" data-status="pending"' in row(failed)
    assert 'data-cell="build" data-status="succeeded"' in row(done)
    green = row(done)
    assert "running" in green[green.index('data-cell="test"'):]
    build = green[green.index('data-cell="build"'):green.index('data-cell="test"')]
    assert "<span data-duration></span>" not in build  # a finished stage names its duration


def test_grid_durations_and_words_are_the_run_pages():
    wf = approval_workflow(stages=["build", "deploy"])
    agent = agent_driver(wf)
    run, _ = awaiting_approval_run(agent, "ship")
    failed = failing(agent_driver(wf), "other", "boom")
    runs = list(Run.objects.filter(id__in=[run["id"], failed["id"]]).select_related("workflow").order_by("created_at"))
    grid = stage_selectors.stage_grid(workflow=Workflow.objects.get(id=wf.id), runs=runs)
    for row in grid:
        r = selectors.run_detail(run_id=row["run"].id)
        timeline = drawing.stage_timeline(r, selectors.run_stage_events(run=r),
                                          list(selectors.effects_of_intent(run=r)), now=timezone.now())
        for cell, line in zip(row["cells"], timeline["rows"]):
            assert cell["word"] == line["word"], (cell, line)
            assert cell["seconds"] == (line["span"] or {}).get("seconds"), (cell, line)
    assert grid[0]["cells"][0]["seconds"] is not None and grid[0]["cells"][0]["seconds"] > 0


def test_workflow_page_queries_are_flat_in_runs():
    wf = escalation_workflow(max_retries=10)
    agent = agent_driver(wf)
    viewer, _ = login("viewer")

    def add_run(n):
        run = agent.trigger(intent=f"r{n}", inputs={"intent": f"r{n}"})
        agent.pass_stage(run["id"], "build")

    assert_queries_flat(viewer, reverse("ledger:workflow_detail", args=[wf.slug]), add_run, rows=4)


def test_runs_list_and_oncall_name_the_current_stages_duration():
    wf = escalation_workflow(max_retries=5)
    agent = agent_driver(wf)
    failed = failing(agent, "red", "boom")  # build failed: how long it took
    running = agent.trigger(intent="green", inputs={"intent": "green"})
    agent.event(running["id"], "build", "started")  # build running: for how long so far
    idle = agent.trigger(intent="idle", inputs={"intent": "idle"})  # not started: no duration
    viewer, _ = login("viewer")
    html = texts(viewer.get(reverse("ledger:run_list")))
    row = lambda page, run: page[page.index(run["id"][:8]):].split("</tr>")[0]  # noqa: E731
    assert "data-stage-seconds>" in row(html, failed) and "running" not in row(html, failed)
    assert "data-stage-seconds>running " in row(html, running)
    assert "data-stage-seconds" not in row(html, idle)
    oncall = texts(viewer.get(reverse("ledger:oncall")))
    assert "data-stage-seconds>" in oncall[oncall.index(f'id="oncall-{failed["id"]}"'):].split("</tr>")[0]


def test_runs_list_and_oncall_queries_stay_flat_with_stage_durations():
    wf = escalation_workflow(max_retries=10)
    agent = agent_driver(wf)
    viewer, _ = login("viewer")

    def add_failed(n):
        failing(agent, f"f{n}", "boom")

    assert_queries_flat(viewer, reverse("ledger:run_list"), add_failed, rows=4)
    assert_queries_flat(viewer, reverse("ledger:oncall") + "?superseded=1",
                        lambda n: failing(agent, f"o{n}", "boom"), rows=4)
