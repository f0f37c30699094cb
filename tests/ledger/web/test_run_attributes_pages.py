"""Run attributes on the pages (SPEC §15): ``attr.<key>=<value>`` on /runs/ and /oncall/, kept by the forms,
by saved views, by a bulk on-call action's filtered set; in a constant number of queries."""

import pytest
from django.urls import reverse

from ledger import services
from ledger.models import Run, SavedView
from tests.factories import HX, client_for, login, make_agent, make_workflow, page_queries, texts
from tests.ledger.helpers import AgentDriver

pytestmark = pytest.mark.django_db


def _labelled(wf, intent, **attributes):
    run, _ = services.run_trigger(workflow_slug=wf.slug, inputs={}, intent=intent, attributes=attributes)
    return run


def test_the_runs_page_filters_by_attributes_and_keeps_them_in_its_form():
    wf = make_workflow()
    _labelled(wf, "infra-two", team="infra", tier=2)
    _labelled(wf, "web-two", team="web", tier="2")
    _labelled(wf, "infra-one", team="infra", tier=1)
    viewer, _ = login("viewer")
    for extra in ({}, HX):
        html = texts(viewer.get(reverse("ledger:run_list") + "?attr.team=infra&attr.tier=2", **extra))
        assert "infra-two" in html and "web-two" not in html and "infra-one" not in html
    html = texts(viewer.get(reverse("ledger:run_list") + "?attr.tier=2"))
    assert "infra-two" in html and "web-two" in html and "infra-one" not in html
    assert '<input type="hidden" name="attr.tier" value="2">' in html  # the form keeps it
    assert 'data-attr-filter="tier"' in html
    assert 'href="?attr.team=infra"' in texts(viewer.get(reverse("ledger:run_list"), {"q": "infra-one"}))


def test_an_attr_filter_that_does_not_parse_is_said_and_ignored_on_the_page():
    wf = make_workflow()
    _labelled(wf, "kept", team="infra")
    viewer, _ = login("viewer")
    html = texts(viewer.get(reverse("ledger:run_list") + "?attr.Team=infra"))
    assert "attr.Team" in html and "The filter is ignored." in html and "kept" in html


def test_a_saved_view_keeps_its_attribute_filters():
    wf = make_workflow()
    _labelled(wf, "infra-job", team="infra")
    _labelled(wf, "web-job", team="web")
    editor, _ = login("editor")
    editor.post(reverse("ledger:saved_view_create"),
                {"name": "infra", "query": f"workflow={wf.slug}&attr.team=infra&attr.Bad=1&created_after=2026-01-01"})
    view = SavedView.objects.get(name="infra")
    assert "attr.team=infra" in view.query and "Bad" not in view.query and "created_after" in view.query
    html = texts(editor.get(view.url()))
    assert "infra-job" in html and "web-job" not in html


def test_the_run_list_and_its_attribute_filter_cost_a_constant_number_of_queries():
    wf = make_workflow()
    viewer, _ = login("viewer")
    url = reverse("ledger:run_list") + "?attr.team=infra&attr.tier=2"
    _labelled(wf, "q-0", team="infra", tier=2)
    few = page_queries(viewer, url)
    for n in range(1, 8):
        _labelled(wf, f"q-{n}", team="infra", tier=2, extra=f"x{n}")
    assert page_queries(viewer, url) == few
    assert page_queries(viewer, reverse("ledger:run_list")) == few


def _escalated(agent, intent, **attributes):
    agent.fail_stage(agent.trigger(intent=intent, inputs={"i": intent}, attributes=attributes)["id"], "build")
    run = agent.trigger(intent=intent, inputs={"i": intent})
    assert run["state"] == "escalated", run
    return run


def test_a_bulk_oncall_action_acts_on_the_attribute_filtered_set():
    wf = make_workflow(stages=["build", "test"], effect_stages=[], approval_stages=[], max_retries=1)
    agent = AgentDriver(client_for(make_agent()[1]), wf.slug)
    # (the escalated run is the re-trigger's new run: its attributes are set here)
    infra = [_escalated(agent, f"infra-{n}") for n in range(2)]
    web = _escalated(agent, "web-0")
    for run, team in ((infra[0], "infra"), (infra[1], "infra"), (web, "web")):
        Run.objects.filter(id=run["id"]).update(attributes={"team": team})
    oncall, _ = login("oncall")
    page = texts(oncall.get(reverse("ledger:oncall") + "?attr.team=infra"))
    assert "infra-0" in page and "infra-1" in page and "web-0" not in page
    assert page.count('<input type="hidden" name="attr.team" value="infra">') == 2  # the filter form, the bulk form
    chosen = [infra[0]["id"], infra[1]["id"], web["id"]]  # a run outside the filtered set is refused
    response = oncall.post(reverse("ledger:oncall_bulk"),
                           {"action": "abandon", "run": chosen, "reason": "team retired", "attr.team": "infra"}, **HX)
    html = texts(response)
    assert "Abandon: 2 done, 1 refused." in html and "of these filters" in html
    assert "web-0" not in html  # the table comes back for the same filters
    states = dict(Run.objects.filter(id__in=chosen).values_list("intent", "state"))
    assert states == {"infra-0": "abandoned", "infra-1": "abandoned", "web-0": "escalated"}


def test_the_oncall_page_with_attribute_filters_costs_a_constant_number_of_queries():
    wf = make_workflow(stages=["build", "test"], effect_stages=[], approval_stages=[], max_retries=1)
    agent = AgentDriver(client_for(make_agent()[1]), wf.slug)
    oncall, _ = login("oncall")
    url = reverse("ledger:oncall") + "?attr.team=infra"
    Run.objects.filter(id=_escalated(agent, "c-0")["id"]).update(attributes={"team": "infra"})
    few = page_queries(oncall, url)
    for n in range(1, 4):
        Run.objects.filter(id=_escalated(agent, f"c-{n}")["id"]).update(attributes={"team": "infra"})
    assert page_queries(oncall, url) == few


def test_the_run_page_shows_the_attributes_as_filters():
    wf = make_workflow()
    run = _labelled(wf, "shown", team="infra", hot=True)
    viewer, _ = login("viewer")
    html = texts(viewer.get(reverse("ledger:run_detail", args=[run.id])))
    assert f'href="{reverse("ledger:run_list")}?attr.team=infra"' in html and "hot=true" in html
