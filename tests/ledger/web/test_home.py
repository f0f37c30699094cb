"""The dashboard (ledger/web/home.py)."""

import pytest
from django.test import Client
from django.urls import reverse

from tests.browser.scenarios import agent_driver, escalated_run, escalation_workflow
from tests.factories import HX, login, texts

pytestmark = pytest.mark.django_db


def test_dashboard_refreshes_while_something_is_pending():
    viewer, _ = login("viewer")
    assert "every 5s" not in texts(viewer.get(reverse("dashboard")))
    escalated_run(agent_driver(escalation_workflow()), "d")
    html = texts(viewer.get(reverse("dashboard")))
    assert "every 5s" in html
    assert texts(viewer.get(reverse("dashboard"), **HX)).strip().startswith('<div id="dashboard-body"')
    assert Client().get(reverse("dashboard")).status_code == 302
