"""Every page form, posted hostile values by a signed-in editor and owner, never answers 5xx; a NUL in any
field is refused as a whole (the page's message, or 400 for htmx) and nothing is written (SPEC §8)."""

import inspect

import pytest
from django import forms
from django.apps import apps
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from django.utils import timezone

from knowledge import services as knowledge_services
from knowledge.web import forms as knowledge_forms
from ledger.models import Alert, AuditEntry, Notification
from ledger.web import forms as ledger_forms
from tests.browser.scenarios import (
    agent_driver,
    approval_workflow,
    awaiting_approval_run,
    escalated_run,
    escalation_workflow,
)
from tests.factories import HX, make_agent, make_operator, page_client
from tests.knowledge.conftest import proposal

pytestmark = pytest.mark.django_db

_NOT_PAGES = ("api/", "admin/", "integrations/", "login/", "logout/", "healthz", "static/")
# Fields the views read from request.POST themselves, besides those of the page forms.
_READ_DIRECTLY = {"mode", "action", "unread", "to_stage", "compensate", "next", "key", "version"}
_HOSTILE = ["9" * 40, "-1", "", " ", "nan", "2026-01-01T00:00:00\x01", "../../", "<script>", "é" * 3000]


def _page_routes(resolver=None, prefix="", namespace=""):
    """(name, path parameters) of every named page route."""
    for pattern in (resolver or get_resolver()).url_patterns:
        route = prefix + str(pattern.pattern)
        if route.lstrip("^").startswith(_NOT_PAGES):
            continue
        if isinstance(pattern, URLResolver):
            inner = f"{namespace}{pattern.namespace}:" if pattern.namespace else namespace
            yield from _page_routes(pattern, route, inner)
        elif isinstance(pattern, URLPattern) and pattern.name:
            yield namespace + pattern.name, sorted(pattern.pattern.regex.groupindex)


def _form_fields() -> set[str]:
    names = set(_READ_DIRECTLY)
    for module in (ledger_forms, knowledge_forms):
        for _, form in inspect.getmembers(module, inspect.isclass):
            if issubclass(form, forms.BaseForm):
                names |= set(form.base_fields)
    return names


def _state() -> dict:
    """Every row of the ledger's and the knowledge store's tables but the audit trail (refusals are recorded)."""
    return {model._meta.label: sorted(map(repr, model.objects.values_list()))
            for app in ("ledger", "knowledge") for model in apps.get_app_config(app).get_models()
            if model is not AuditEntry and not model._meta.proxy}


@pytest.fixture
def world():
    owner, _ = make_operator("owner")
    failed, escalated = escalated_run(agent_driver(escalation_workflow()), "fuzz-escalated")
    workflow = approval_workflow()
    run, approval = awaiting_approval_run(agent_driver(workflow), "fuzz-approval")
    claim = knowledge_services.claim_propose(user=owner, data=proposal())
    Notification.objects.create(user=owner, kind="escalation", subject="fuzz", url="/", dedupe_key="fuzz",
                                created_at=timezone.now())
    alert = Alert.objects.create(key="fuzz/r/s", workflow=workflow, rule="r", kind="queue_age", severity="page",
                                 subject="s", summary="fuzz", opened_at=timezone.now(), updated_at=timezone.now())
    return {"alert_id": alert.id, "run_id": escalated["id"], "approval_id": approval["id"], "slug": workflow.slug, "key": claim.key,
            "notification_id": Notification.objects.get(user=owner).id, "prefix": failed["id"][:8],
            "runs": [failed["id"], escalated["id"]], "owner": owner, "name": make_agent()[0].username,
            "token": "not-a-signed-link"}


def _form_urls(world, client) -> list[str]:
    """The pages that take a POST (the others answer 405)."""
    urls = [reverse(name, kwargs={param: world[param] for param in params}) for name, params in _page_routes()]
    return [url for url in urls if client.post(url, {"next": "\x00"}).status_code != 405]


def test_the_fuzz_reaches_the_forms_that_answered_500():
    names = {name for name, _ in _page_routes()}
    assert {"knowledge:claim_accept", "knowledge:claim_refresh", "knowledge:claim_invalidate",
            "knowledge:claim_revoke", "ledger:approval_reject", "ledger:run_abandon", "ledger:oncall_bulk"} <= names
    assert {"reason", "key", "run", "observed_at", "source_refs"} <= _form_fields()


def test_a_nul_in_any_page_form_field_is_refused_and_nothing_is_written(world):
    """Each field of each form in turn holds a NUL (as htmx posts it, then once per form as a plain post): the
    page refuses the form whole, before any role or authorizer reads it (``stateboard.policy.page``), so one
    identity, the owner, meets every refusal an editor would."""
    client = page_client(world["owner"])
    fields = _form_fields()
    plausible = {name: "fuzz" for name in fields} | {"key": world["key"], "run": world["runs"],
                                                     "action": "abandon", "version": "1"}
    before = _state()
    for url in _form_urls(world, client):
        for field, extra in [(field, HX) for field in sorted(fields)] + [(sorted(fields)[0], {})]:
            body = plausible | {field: f"a\x00{field}"}
            response = client.post(url, body, **extra)
            assert response.status_code < 500, (url, field, response.status_code)
            if response.status_code not in (404, 405):
                assert response.status_code in (302, 400, 403), (url, field, response.status_code)
    assert _state() == before


def _page_urls(world) -> list[str]:
    return [reverse(name, kwargs={param: world[param] for param in params}) for name, params in _page_routes()]


@pytest.mark.slow  # every page form × hostile values, like the API's schemathesis run
@pytest.mark.parametrize("role", ["editor", "owner"])
def test_hostile_values_in_page_forms_never_answer_a_server_error(world, role):
    """Each role's posts reach its own refusals and actions (an authorizer lets the owner past the editor's)."""
    client = page_client(world["owner"] if role == "owner" else make_operator(role)[0])
    fields = _form_fields()
    for url in _page_urls(world):
        for value in _HOSTILE:
            for extra in ({}, HX):
                response = client.post(url, {name: value for name in fields}, **extra)
                assert response.status_code < 500, (url, value[:20], response.status_code)


@pytest.mark.slow  # every page × hostile values
def test_hostile_paging_parameters_on_any_page_never_answer_a_server_error(world):
    """Every page read (plain and htmx) with hostile ``page``, ``before`` and ``from``: never a 5xx. Pages
    read alike for every signed-in role (the roles' narrowed pages are tests/stateboard/test_policy_matrix.py's),
    so the owner reads them (this ran once for the editor too, the same reads)."""
    client = page_client(world["owner"])
    for url in _page_urls(world):
        for value in _HOSTILE:
            for extra in ({}, HX):
                response = client.get(url, {"page": value, "before": value, "from": value}, **extra)
                assert response.status_code < 500, (url, value[:20], response.status_code)
