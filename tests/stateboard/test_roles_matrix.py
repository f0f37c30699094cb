"""Role × endpoint matrix, generated from the URL conf: every API view under /api/v1/ (ledger,
knowledge and whatever comes next) must state a rule for every method it implements, and the
rule must hold for real tokens of every role. Views whose action an authorizer decides (the policy's
``authorizer``) are checked role by role against it in tests/stateboard/test_authorizers_matrix.py."""

import uuid

import pytest
from django.urls import URLPattern, URLResolver, get_resolver
from rest_framework.views import APIView

from stateboard.policy import PolicyApi, policy_of
from stateboard.roles import PUBLIC
from tests.factories import client_for, make_agent, make_operator, make_workflow
from tests.ledger.helpers import AgentDriver

pytestmark = pytest.mark.django_db

API_PREFIX = "api/v1/"
ROLES = ("viewer", "editor", "owner", "oncall", "agent", "anonymous")
# Views that deliberately sit outside the policy pipeline (the OpenAPI schema and its docs are public).
PUBLIC_VIEWS = {"drf_spectacular.views.SpectacularAPIView", "drf_spectacular.views.SpectacularSwaggerView"}
SKIPPED_METHODS = {"options", "head"}
AUTHORIZER_CODES = {"permission_denied", "not_claim_owner", "not_allowed_to_accept", "requester_cannot_decide"}


def _walk(patterns, prefix=""):
    for entry in patterns:
        if isinstance(entry, URLResolver):
            yield from _walk(entry.url_patterns, prefix + str(entry.pattern))
        elif isinstance(entry, URLPattern):
            yield prefix + str(entry.pattern), entry


def _view_class(pattern: URLPattern):
    return getattr(pattern.callback, "cls", None) or getattr(pattern.callback, "view_class", None)


def _qualname(cls) -> str:
    return f"{cls.__module__}.{cls.__qualname__}" if cls else "<function view>"


def api_endpoints():
    """(route, pattern, view class) for every URL under /api/v1/."""
    return [(route, pattern, _view_class(pattern))
            for route, pattern in _walk(get_resolver().url_patterns) if route.startswith(API_PREFIX)]


def implemented_methods(cls) -> list[str]:
    return [m.upper() for m in cls.http_method_names if m not in SKIPPED_METHODS and hasattr(cls, m)]


def role_endpoints():
    """(route, method, view class) for every method of every role-checked API view."""
    cases = []
    for route, pattern, cls in api_endpoints():
        if cls is None or _qualname(cls) in PUBLIC_VIEWS:
            continue
        for method in implemented_methods(cls):
            cases.append((route, method, cls))
    return cases


def _param(name: str, objects: dict, converter: str) -> str:
    if name in objects:
        return objects[name]
    return str(uuid.uuid4()) if converter == "uuid" else f"missing-{name}"  # unknown, well-formed


def _url(route: str, pattern: URLPattern, objects: dict, *, malformed: bool = False) -> str:
    url = "/" + route
    for name in pattern.pattern.converters:
        start = url.index("<")
        end = url.index(">", start)
        converter, _, declared = url[start + 1:end].rpartition(":")
        assert declared == name, (route, name)
        value = "not-a-uuid" if malformed and converter == "uuid" else _param(name, objects, converter)
        url = url[:start] + value + url[end + 1:]
    return url


def _pattern_for(route: str) -> URLPattern:
    return next(p for r, p, _ in api_endpoints() if r == route)


@pytest.fixture
def clients():
    """Real tokens from the factories: one identity per role, plus an anonymous client."""
    tokens = {role: make_operator(role)[1] for role in ("viewer", "editor", "owner", "oncall")}
    tokens["agent"] = make_agent()[1]
    tokens["anonymous"] = None
    return {role: client_for(token) for role, token in tokens.items()}


@pytest.fixture
def objects(clients):
    """Real objects for the path parameters (a run, its workflow); approvals use an unknown id,
    because which editor/on-call may decide depends on the approval's kind (tested in ledger/)."""
    workflow = make_workflow(approval_stages=[])
    run = AgentDriver(clients["agent"], workflow.slug).trigger()
    return {"slug": workflow.slug, "run_id": run["id"], "approval_id": str(uuid.uuid4())}


def test_roles_matrix_covers_every_api_route():
    """The generated matrix holds every non-public route of both apps, the known ledger ones included."""
    routes = {route for route, _, _ in role_endpoints()}
    for expected in ("api/v1/runs/", "api/v1/approvals/<uuid:approval_id>/approve/",
                     "api/v1/runs/<uuid:run_id>/retry/", "api/v1/workflows/<slug:slug>/"):
        assert expected in routes
    non_public = {route for route, _, cls in api_endpoints() if _qualname(cls) not in PUBLIC_VIEWS}
    assert routes == non_public


def test_roles_matrix_every_api_method_has_a_rule():
    """Every API view is role-checked and names a rule for each method it implements."""
    missing = []
    for route, pattern, cls in api_endpoints():
        if cls is None or not issubclass(cls, APIView):
            missing.append(f"/{route}: not a DRF view ({pattern.callback!r}), so it has no role rule")
            continue
        if _qualname(cls) in PUBLIC_VIEWS:
            continue
        if not issubclass(cls, PolicyApi):
            missing.append(f"/{route}: {_qualname(cls)} is not a PolicyApi")
        for method in implemented_methods(cls):
            if policy_of(cls, method) is None:
                missing.append(f"{method} /{route}: {_qualname(cls)}.policy has no rule")
    assert not missing, "\n".join(missing)


def _expected(policy, role: str) -> str:
    rule = policy.roles
    if rule == PUBLIC:
        return "allowed"
    if role == "anonymous":
        return "401"
    if policy.authorizer is not None:
        return "authorizer"  # the role verdict is the authorizer's (tests/stateboard/test_authorizers_matrix.py)
    return "allowed" if role in rule else "403"


@pytest.mark.parametrize(("route", "method", "view_class"), role_endpoints(),
                         ids=[f"{m} /{r}" for r, m, _ in role_endpoints()])
def test_roles_matrix_endpoint_answers_by_role(route, method, view_class, clients, objects):
    """Each role is refused (401 anonymous, 403 not in the rule) or let through (any answer but 401/403/5xx)."""
    policy = policy_of(view_class, method)
    assert policy is not None, f"{method} /{route} has no rule"
    pattern = _pattern_for(route)
    urls = {_url(route, pattern, objects), _url(route, pattern, {})}  # real objects, then unknown/malformed ids
    outcomes = {}
    for url, role in ((url, role) for url in sorted(urls) for role in ROLES):
        client = clients[role]
        call = getattr(client, method.lower())
        response = call(url, {}, format="json") if method in ("POST", "PUT", "PATCH") else call(url)
        expected = _expected(policy, role)
        outcomes[(url, role)] = (expected, response.status_code)
        if expected == "authorizer":
            assert response.status_code not in (401,) and response.status_code < 500, (method, url, role)
            if response.status_code == 403:
                assert response.json()["code"] in AUTHORIZER_CODES, response.content
        elif expected == "allowed":
            assert response.status_code not in (401, 403), (method, url, role, response.content)
            assert response.status_code < 500, (method, url, role, response.content)
        else:
            assert response.status_code == int(expected), (method, url, role, response.content)
            assert response.json()["code"] in ("not_authenticated", "permission_denied"), response.content
    # At least one human or machine role may use every endpoint.
    assert any(expected in ("allowed", "authorizer") for expected, _ in outcomes.values()), outcomes


@pytest.mark.parametrize("route", sorted({r for r, p, _ in api_endpoints() if "<uuid:" in r}))
def test_roles_matrix_malformed_uuid_is_json_404(route, clients):
    """A malformed id in a ``<uuid:…>`` path never reaches a view: JSON 404 ``not_found``, for every role."""
    url = _url(route, _pattern_for(route), {}, malformed=True)
    for role in ("viewer", "oncall", "agent"):
        response = clients[role].post(url, {}, format="json")
        assert response.status_code == 404 and response.json()["code"] == "not_found", (url, role)


@pytest.mark.parametrize("route", [r for r, _, cls in api_endpoints() if _qualname(cls) in PUBLIC_VIEWS])
def test_roles_matrix_public_views_answer_anonymous(route):
    """The schema and docs are public: anonymous gets them."""
    response = client_for(None).get("/" + route)
    assert response.status_code == 200
