"""Lists that stay fast at a million rows: the runs list counts at most its cap, and says so."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from ledger import services
from ledger.web.common import CappedPaginator
from tests.factories import login, make_workflow, texts

pytestmark = pytest.mark.django_db


def test_runs_list_past_the_cap_says_more_than_and_never_counts_everything(monkeypatch):
    monkeypatch.setattr(CappedPaginator, "cap", 3)
    wf = make_workflow()
    for n in range(5):
        services.run_trigger(workflow_slug=wf.slug, inputs={}, intent=f"cap-{n}")
    viewer, _ = login("viewer")
    with CaptureQueriesContext(connection) as queries:
        html = texts(viewer.get(reverse("ledger:run_list")))
    assert "More than 3 runs" in html
    counts = [q["sql"] for q in queries if "COUNT(" in q["sql"] and "ledger_run" in q["sql"]]
    assert counts and all("LIMIT 4" in sql for sql in counts)


def test_runs_list_under_the_cap_counts_exactly(monkeypatch):
    monkeypatch.setattr(CappedPaginator, "cap", 3)
    wf = make_workflow()
    for n in range(2):
        services.run_trigger(workflow_slug=wf.slug, inputs={}, intent=f"under-{n}")
    viewer, _ = login("viewer")
    html = texts(viewer.get(reverse("ledger:run_list"), {"workflow": wf.slug}))
    assert "2 runs" in html and "More than" not in html
