"""One door (SPEC §11.1), generated from the URLconf: every endpoint, API and page, declares a policy;
each refusal a policy names (the lease, the workflow's ``agents``, the rate limit, a page action's roles
and authorizer) happens on every endpoint it applies to, appends and triggers included, and nothing is
written when it does. Sign-in and the admin are in it: the admin writes the ledger only through a service."""

import re
import uuid
from dataclasses import dataclass
from typing import Callable

import pytest
from django.contrib import admin
from django.test import Client, RequestFactory, override_settings
from django.urls import get_resolver, resolve, reverse
from django.utils import timezone

from ledger.models import Alert, ApiToken, Approval, AuditEntry, Checkpoint, LedgerEvent, Notification, Run, Workflow
from stateboard.limits import throttled_total
from stateboard.policy import ANY, PUBLIC, policy_of
from tests.factories import HX, client_for, make_agent, make_operator, make_workflow, page_client, unique
from tests.ledger.helpers import AgentDriver
from tests.stateboard.test_authorizers_matrix import (
    _awaiting,
    _claim,
    _completed,
    _escalated,
    _pending,
    _refresh_page,
    _stale_claim,
)
from tests.stateboard.test_page_fuzz import _state
from tests.stateboard.test_roles_matrix import _walk

pytestmark = pytest.mark.django_db

# Outside the pipeline on purpose (SPEC §11.1: health, metrics and the schema are exempt; sign-out, Django's own
# logout, which after a single sign-on goes on to the issuer's end-session endpoint).
# Sign-in (ours and the admin's) and the admin's pages pass it.
EXEMPT_PREFIXES = ("healthz", "metrics", "api/v1/schema/", "api/v1/docs/", "logout/", "static/")
SKIPPED_METHODS = {"options", "head", "trace"}


def endpoints():
    """(route, pattern, view) of every URL the product serves, but the exempt ones."""
    return [(route, pattern, _view_of(pattern.callback)) for route, pattern in _walk(get_resolver().url_patterns)
            if not route.startswith(EXEMPT_PREFIXES)]


def _view_of(callback):
    """The class of a class-based view; an admin page is its site's wrapper (whatever view it wraps)."""
    if hasattr(callback, "admin_site") or hasattr(callback, "model_admin"):
        return callback
    return getattr(callback, "view_class", None) or callback


def methods_of(view) -> list[str]:
    if isinstance(view, type):
        return [m.upper() for m in view.http_method_names if m not in SKIPPED_METHODS and hasattr(view, m)]
    for cell in view.__closure__ or ():  # what require_GET / require_POST let through
        if isinstance(cell.cell_contents, list) and cell.cell_contents and \
                all(m in ("GET", "POST", "HEAD", "PUT", "PATCH", "DELETE") for m in cell.cell_contents):
            return [m for m in cell.cell_contents if m != "HEAD"]
    return ["GET"]


def declared(view, method: str):
    if isinstance(view, type):
        return policy_of(view, method)
    site = getattr(view, "admin_site", None) or getattr(getattr(view, "model_admin", None), "admin_site", None)
    return getattr(view, "policy", None) or getattr(site, "policy", None)  # the admin's: its site's, on every page


def cases(predicate):
    return [(route, method) for route, _, view in endpoints() for method in methods_of(view)
            if declared(view, method) is not None and predicate(declared(view, method))]


def _url(route: str, values: dict) -> str:
    url = "/" + re.sub(r"\^|\$|\(\?P<\w+>[^)]*\)", lambda m: "" if m.group() in "^$" else "abcd1234", route)
    while "<" in url:
        start, end = url.index("<"), url.index(">")
        converter, _, name = url[start + 1:end].rpartition(":")
        value = values.get(name, str(uuid.uuid4()) if converter == "uuid" else "1" if converter == "int" else "x")
        url = url[:start] + value + url[end + 1:]
    return url


def test_every_endpoint_declares_a_policy():
    """A new endpoint without a policy fails here, whatever answers it (API view or page)."""
    missing = [f"/{route}" for route, _, view in endpoints()
               if not any(declared(view, method) for method in (methods_of(view) or ["GET"]))]
    assert not missing, "endpoints without a policy:\n" + "\n".join(missing)
    assert len(endpoints()) > 40  # both apps' API and pages are walked


def test_the_matrix_names_the_run_scoped_and_allow_listed_writes():
    holder = {(r, m) for r, m in cases(lambda p: p.run_scope == "holder")}
    assert holder == {("api/v1/runs/<uuid:run_id>/events/", "POST"), ("api/v1/runs/<uuid:run_id>/checkpoints/", "POST"),
                      ("api/v1/runs/<uuid:run_id>/approvals/", "POST")}
    listed = {r for r, m in cases(lambda p: p.agents is not None)}
    assert {"api/v1/runs/", "api/v1/runs/lease/", "api/v1/workflows/<slug:slug>/goals/"} <= listed


class Fleet:
    """A workflow, agent A holding a run of it, agent B, and a queued run nobody holds."""

    def __init__(self):
        self.wf = make_workflow(stages=["build", "publish"], effect_stages=["publish"], approval_stages=["publish"])
        _, a_token = make_agent()
        self.b_user, b_token = make_agent()
        self.a = AgentDriver(client_for(a_token), self.wf.slug)
        self.b = AgentDriver(client_for(b_token), self.wf.slug)
        self.held = self.a.trigger(intent="held")["id"]
        _, editor_token = make_operator("editor")
        self.queued = AgentDriver(client_for(editor_token), self.wf.slug).trigger(intent="queued")["id"]

    def written(self) -> tuple:
        return (LedgerEvent.objects.count(), Checkpoint.objects.count(), Approval.objects.count(),
                list(Run.objects.order_by("id").values_list("id", "state", "lease_owner", "lease_id")))


RUN_SCOPED_BODIES = {
    "events": {"client_event_id": "b-1", "stage": "build", "kind": "started"},
    "checkpoints": {"state_table": {"build": {"status": "succeeded"}, "publish": {"status": "verified"}}},
    "approvals": {"kind": "high_impact", "stage": "publish",
                  "action": {"system": "cms", "operation": "publish", "target": "t", "summary": "s"}},
}


@pytest.mark.parametrize(("route", "method"), cases(lambda p: p.run_scope == "holder"))
def test_a_run_scoped_write_is_refused_unless_the_caller_holds_the_lease(route, method):
    """Another agent's run: 409 lease_held; a queued run or one nobody holds: 409 not_leased; nothing
    written, no lease granted, and the refusal is audited."""
    fleet = Fleet()
    body = RUN_SCOPED_BODIES[route.rstrip("/").rsplit("/", 1)[-1]]
    before = fleet.written()
    held = fleet.b.client.post(_url(route, {"run_id": fleet.held}), body, format="json")
    assert held.status_code == 409 and held.json()["code"] == "lease_held", held.content
    queued = fleet.b.client.post(_url(route, {"run_id": fleet.queued}), body, format="json")
    assert queued.status_code == 409 and queued.json()["code"] == "not_leased", queued.content
    assert fleet.written() == before
    # each conflict is recorded once, as the agent's refused request the fleet counts (SPEC §15)
    recorded = AuditEntry.objects.filter(code__in=["lease_held", "not_leased"])
    assert sorted(recorded.values_list("code", "outcome", "actor")) == sorted(
        (code, "refused", f"agent:{fleet.b_user.username}") for code in ("lease_held", "not_leased"))
    Run.objects.filter(id=fleet.held).update(lease_owner="", lease_id=None)  # a run nobody holds
    nobody = fleet.b.client.post(_url(route, {"run_id": fleet.held}), body, format="json")
    assert nobody.status_code == 409 and nobody.json()["code"] == "not_leased", nobody.content
    assert Run.objects.get(id=fleet.held).lease_owner == ""  # writing never grants a lease


def test_another_agents_checkpoint_is_never_trusted_by_the_next_decision():
    """The reported attack: B marks every stage of A's run done; A's run fails; the next trigger must not
    decide noop / completed_same_fingerprint for work that never ran."""
    fleet = Fleet()
    refused = fleet.b.client.post(f"/api/v1/runs/{fleet.held}/checkpoints/", RUN_SCOPED_BODIES["checkpoints"],
                                  format="json")
    assert refused.status_code == 409
    fleet.a.event(fleet.held, "build", "started")
    fleet.a.event(fleet.held, "build", "failed", reason_code="build_error")
    again = fleet.a.trigger(intent="held")
    assert again["decision"]["outcome"] != "noop", again["decision"]
    saved = fleet.a.client.post(f"/api/v1/runs/{again['id']}/checkpoints/", {"state_table": {}}, format="json")
    assert saved.status_code == 201 and saved.json()["saved_by"] == again["lease"]["owner"]


@pytest.mark.parametrize(("route", "method"), cases(lambda p: p.agents is not None))
def test_a_workflow_allow_list_refuses_other_agents_on_every_endpoint_it_applies_to(route, method):
    """``agents`` names who may serve the workflow: anyone else is 403 agent_not_allowed, audited, nothing
    written; the allowed agent passes the same check."""
    fleet = Fleet()
    Workflow.objects.filter(id=fleet.wf.id).update(agents=["someone-else"])
    bodies = {"api/v1/runs/": {"workflow": fleet.wf.slug, "inputs": {}},
              "api/v1/runs/lease/": {"workflows": [fleet.wf.slug]},
              "api/v1/workflows/<slug:slug>/goals/": {"intent": "held", "objective": "x"}}
    body = bodies.get(route) or RUN_SCOPED_BODIES[route.rstrip("/").rsplit("/", 1)[-1]]
    before = fleet.written()
    refused = fleet.b.client.post(_url(route, {"run_id": fleet.held, "slug": fleet.wf.slug}), body, format="json")
    assert refused.status_code == 403 and refused.json()["code"] == "agent_not_allowed", refused.content
    assert fleet.written() == before
    assert AuditEntry.objects.filter(code="agent_not_allowed", outcome="refused").count() == 1
    Workflow.objects.filter(id=fleet.wf.id).update(agents=[fleet.b_user.username])
    allowed = fleet.b.client.post(_url(route, {"run_id": fleet.held, "slug": fleet.wf.slug}), body, format="json")
    assert allowed.status_code != 403, allowed.content


def test_a_lease_naming_no_workflow_skips_the_runs_of_workflows_that_refuse_the_caller():
    fleet = Fleet()
    Workflow.objects.filter(id=fleet.wf.id).update(agents=["someone-else"])
    assert fleet.b.client.post("/api/v1/runs/lease/", {}, format="json").status_code == 204
    Workflow.objects.filter(id=fleet.wf.id).update(agents=[])
    assert fleet.b.lease()["id"] == fleet.queued


RATE_CASES = [(route, method) for route, method in cases(lambda p: p.rate is not None and p.rate_keys is None)
              if not route.startswith("admin/")]  # the admin's pages: one test below, sign-in: its own


@pytest.mark.parametrize(("route", "method"), RATE_CASES)
def test_a_configured_rate_limit_answers_429_on_every_endpoint(route, method):
    """With API_RATE_LIMITS set, the request past the limit is 429 ``throttled`` with Retry-After,
    whatever the endpoint (an append and a trigger included), it is counted once (what /metrics shows as
    ``stateboard_throttled_total``, below) and it is not audited."""
    wf = make_workflow(stages=["build", "publish"], effect_stages=["publish"], approval_stages=["publish"])
    agent = AgentDriver(client_for(make_agent()[1]), wf.slug)  # holding a run of the workflow
    api = route.startswith("api/")
    client = agent.client if api else page_client(make_operator("oncall")[0])
    url = _url(route, {"run_id": agent.trigger(intent="held")["id"], "slug": wf.slug,
                       "approval_id": str(uuid.uuid4())})
    counted = throttled_total()
    with override_settings(API_RATE_LIMITS="agent=2/minute,human=2/minute,anon=2/minute"):
        call = getattr(client, method.lower())
        answers = [call(url, {}, **({"format": "json"} if api else {})) for _ in range(3)]
    assert [a.status_code for a in answers[:2]] != [429, 429]
    last = answers[2]
    assert last.status_code == 429, (url, [a.status_code for a in answers])
    assert int(last["Retry-After"]) >= 1
    if api:
        assert last.json()["code"] == "throttled"
    assert not AuditEntry.objects.filter(code="throttled").exists()
    assert throttled_total() == counted + 1


def test_metrics_show_the_throttled_answers_counted():
    """/metrics shows the count of 429s the rate limits answered (the matrix above checks each is counted)."""
    client = client_for(make_agent()[1])
    with override_settings(API_RATE_LIMITS="agent=1/minute"):
        assert [client.get("/api/v1/runs/").status_code for _ in range(2)] == [200, 429]
    metrics = client_for(None).get("/metrics").content.decode()
    assert f"stateboard_throttled_total {throttled_total()}" in metrics and throttled_total() >= 1


def test_sign_in_and_the_admin_are_in_the_matrix():
    """Sign-in (ours and the admin's) declares the sign-in policy: counted per user name and per address
    under `login`, a lockout audited; every admin page declares its site's policy."""
    from stateboard.signin import SIGN_IN

    routes = {route: declared(view, "POST") for route, _, view in endpoints()}
    assert routes["login/"] is SIGN_IN and routes["admin/login/"] is SIGN_IN
    assert SIGN_IN.rate == "login" and SIGN_IN.rate_keys is not None and SIGN_IN.audit == "sign_in"
    for route in ("login/sso/", "login/sso/callback/"):  # single sign-on (SPEC §17): public, counted per address
        sso = routes[route]
        assert (sso.roles, sso.rate, sso.audit) == (PUBLIC, "login", "sign_in") and sso.rate_keys is not None
        assert methods_of(next(view for r, _, view in endpoints() if r == route)) == ["GET"]
    admin_pages = [route for route in routes if route.startswith("admin/") and route != "admin/login/"]
    assert len(admin_pages) > 20 and all(routes[route] is not None for route in admin_pages)


def test_a_configured_rate_limit_answers_429_on_every_admin_page():
    """The admin's pages pass the same pipeline: past the rate, 429, before Django's own check (which
    sends anyone but a superuser to sign in: the cheap answer the first two calls get here)."""
    admin_routes = [route for route, _, _ in endpoints() if route.startswith("admin/") and route != "admin/login/"]
    client = Client()
    for n, route in enumerate(admin_routes):
        url = _url(route, {"object_id": "1", "app_label": "ledger"})
        address = f"192.0.2.{n % 250}" if n < 250 else f"198.18.0.{n % 250}"  # an anonymous count of its own
        with override_settings(API_RATE_LIMITS="anon=2/minute"):
            answers = [client.get(url, REMOTE_ADDR=address).status_code for _ in range(3)]
        assert answers == [302, 302, 429], (url, answers)
    boss, _ = make_operator("owner")
    boss.is_staff = boss.is_superuser = True
    boss.save(update_fields=["is_staff", "is_superuser"])
    assert page_client(boss).get("/admin/ledger/run/").status_code == 200


def test_health_metrics_and_schema_are_never_throttled():
    with override_settings(API_RATE_LIMITS="anon=1/minute"):
        for url in ("/healthz", "/metrics", "/api/v1/schema/"):
            assert {client_for(None).get(url).status_code for _ in range(3)} <= {200, 503}, url


def test_a_refused_goal_creation_is_audited():
    """The refused goal post writes its audit entry, as a refused trigger does."""
    fleet = Fleet()
    viewer = client_for(make_operator("viewer")[1])
    refused = viewer.post(f"/api/v1/workflows/{fleet.wf.slug}/goals/", {"intent": "held"}, format="json")
    assert refused.status_code == 403
    assert AuditEntry.objects.filter(action="goal_create", outcome="refused").count() == 1


def test_a_lease_follows_the_agents_identity_not_its_name():
    """A renamed agent keeps its run (and its events show the new name); a new agent given the freed
    name gets nothing."""
    fleet = Fleet()
    holder = Run.objects.get(id=fleet.held).lease_holder
    old_name = holder.username
    holder.username = old_name + "-renamed"
    holder.save()
    kept = fleet.a.event(fleet.held, "build", "started")
    assert kept["actor"] == f"agent:{old_name}-renamed"
    impostor_user, impostor_token = make_agent(name=old_name)
    impostor = AgentDriver(client_for(impostor_token), fleet.wf.slug)
    refused = impostor.event(fleet.held, "build", "succeeded", expect=409)
    assert refused["code"] == "lease_held"


# ---------------------------------------------------------------- pages: each action's roles and authorizer

ROLES = ("viewer", "editor", "owner", "oncall", "agent")
PEOPLE = frozenset(ROLES) - {"agent"}


@dataclass
class PageAction:
    make: Callable          # (people) -> (the route's kwargs, the form posted)
    allowed: frozenset      # the roles whose post is let through (the others are refused, nothing written)


def _run_form(made: Callable, **form):
    return lambda people: ({"run_id": made(people)["run"]}, {"reason": "matrix", **form})


def _claim_form(made: Callable, **form):
    def make(people):
        claim = made(people)
        return {}, {"key": claim["key"], "reason": "matrix", **({"version": claim["version"]} if "version" in claim
                                                                else {}), **form}
    return make


def _notification(people):
    notice = Notification.objects.create(user=people["viewer"][0], kind="escalation", subject="matrix", url="/",
                                         dedupe_key=unique("matrix"), created_at=timezone.now())
    return {"notification_id": notice.id}, {}


def _firing_alert(people):
    now = timezone.now()
    alert = Alert.objects.create(key=unique("matrix/rule/subject"), workflow=make_workflow(), rule="matrix",
                                 kind="queue_age", severity="page", subject="matrix", summary="matrix", opened_at=now,
                                 updated_at=now)
    return {"alert_id": alert.id}, {"reason": "matrix"}


def _mailed_link(people):
    """An editor's e-mailed Approve link of a pending request (SPEC §17): theirs alone."""
    from tests.ledger.web.test_approval_links import link_to

    return resolve(link_to(_awaiting(people)["approval"], people["editor"][0])).kwargs, {"reason": "matrix"}


PAGE_ACTIONS = {
    "ledger:alert_acknowledge": PageAction(_firing_alert, frozenset({"oncall"})),
    "ledger:alert_resolve": PageAction(_firing_alert, frozenset({"oncall"})),
    "ledger:saved_view_create": PageAction(lambda p: ({}, {"name": unique("view"), "query": "state=failed"}), PEOPLE),
    "ledger:run_rollback": PageAction(_run_form(_completed, to_stage="build"), frozenset({"oncall", "owner"})),
    "ledger:approval_approve": PageAction(lambda p: ({"approval_id": _awaiting(p)["approval"]}, {"reason": "m"}),
                                          frozenset({"editor"})),
    "ledger:approval_reject": PageAction(lambda p: ({"approval_id": _awaiting(p)["approval"]}, {"reason": "m"}),
                                         frozenset({"editor"})),
    "ledger:approval_link": PageAction(_mailed_link, frozenset({"editor"})),
    "ledger:approval_amend": PageAction(lambda p: ({"approval_id": _awaiting(p)["approval"]},
                                                   {"action_json": '{"operation": "canary"}', "reason": "m"}),
                                        frozenset({"editor"})),
    "ledger:oncall_bulk": PageAction(lambda p: ({}, {"action": "abandon", "run": [_escalated(p)["run"]],
                                                     "reason": "matrix"}), frozenset({"oncall"})),
    "ledger:run_retry": PageAction(_run_form(_escalated), frozenset({"oncall"})),
    "ledger:run_compensate": PageAction(_run_form(_escalated), frozenset({"oncall"})),
    "ledger:run_abandon": PageAction(_run_form(_escalated), frozenset({"oncall"})),
    "ledger:agent_revoke": PageAction(lambda p: ({"name": make_agent()[0].username}, {"reason": "matrix"}),
                                      frozenset({"owner"})),
    "ledger:notification_read": PageAction(_notification, frozenset(ROLES)),
    "ledger:notification_read_all": PageAction(lambda p: ({}, {}), frozenset(ROLES)),
    "time_mode": PageAction(lambda p: ({}, {"mode": "utc"}), frozenset(ROLES)),
    "knowledge:claim_accept": PageAction(_claim_form(lambda p: _pending(p, confidence="engineering-inference")),
                                         frozenset({"owner", "editor"})),
    "knowledge:claim_refresh": PageAction(_claim_form(_stale_claim, **_refresh_page(None)),
                                          frozenset({"owner", "editor"})),
    "knowledge:claim_invalidate": PageAction(_claim_form(_claim), frozenset({"owner", "editor"})),
    "knowledge:claim_revoke": PageAction(_claim_form(_claim), frozenset({"owner"})),  # the claim's owner
}


def page_actions() -> dict:
    """{route name: view} of every page that takes a POST (the API, the admin and sign-in apart)."""
    return {resolve(_url(route, {})).view_name: view for route, _, view in endpoints()
            if not route.startswith(("api/", "admin/", "integrations/", "login/")) and "POST" in methods_of(view)}


def test_the_page_matrix_covers_every_page_action():
    """A new page action without its case here fails: its role restriction must be exercised below."""
    assert set(page_actions()) == set(PAGE_ACTIONS)


@pytest.mark.parametrize("name", sorted(PAGE_ACTIONS))
def test_a_page_action_declares_its_rule_in_its_policy(name):
    """A page an identity may be refused names that rule in its policy (an authorizer or its roles), never
    in its body (tests/test_architecture.py); one anyone signed in may use names none."""
    policy = declared(page_actions()[name], "POST")
    assert policy is not None and policy.roles != PUBLIC
    if PAGE_ACTIONS[name].allowed == frozenset(ROLES):
        assert policy.roles == ANY and policy.authorizer is None
    else:
        assert policy.authorizer is not None or policy.roles != ANY


@pytest.fixture
def people():
    found = {role: make_operator(role) for role in PEOPLE}
    found["agent"] = make_agent()
    return found


@pytest.mark.parametrize("name", sorted(PAGE_ACTIONS))
def test_a_page_action_refuses_whom_its_policy_refuses_and_writes_nothing(name, people):
    """Signed out: sent to sign in (htmx: 401); each role without the right: 403, plain and htmx; nothing
    written but the refusals' audit entries. Then a role with the right is let through."""
    case = PAGE_ACTIONS[name]
    kwargs, form = case.make(people)
    url = reverse(name, kwargs=kwargs)
    before, done_before = _state(), AuditEntry.objects.exclude(outcome="refused").count()
    signed_out = Client().post(url, form)
    assert signed_out.status_code == 302 and signed_out["Location"].startswith(reverse("login")), signed_out
    assert Client().post(url, form, **HX).status_code == 401
    for role in sorted(set(ROLES) - case.allowed):
        client = page_client(people[role][0])
        for extra in ({}, HX):
            assert client.post(url, form, **extra).status_code == 403, (name, role, extra)
    assert _state() == before
    assert AuditEntry.objects.exclude(outcome="refused").count() == done_before
    role = sorted(case.allowed)[0]
    let_through = page_client(people[role][0]).post(url, form, **HX)
    assert let_through.status_code not in (401, 403) and let_through.status_code < 500, (name, role, let_through)


# A page people read (GET) is open to every signed-in identity unless its policy narrows it: those are here, each
# with whom it shows to (the others get 403, plain and htmx).
PAGE_READERS = {
    "ledger:alert_list": frozenset({"editor", "owner", "oncall"}),
    "ledger:agent_list": frozenset({"owner", "oncall"}),
}


def page_reads() -> dict:
    """{route name: view} of every page without URL parameters that answers a GET (the API, admin and sign-in
    apart)."""
    return {resolve(_url(route, {})).view_name: view for route, _, view in endpoints()
            if not route.startswith(("api/", "admin/", "integrations/", "login/")) and "GET" in methods_of(view)
            and "<" not in route and "(?P" not in route}


def test_the_readers_matrix_names_every_narrowed_page():
    narrowed = {name for name, view in page_reads().items()
                if (policy := declared(view, "GET")) is not None and (policy.roles != ANY or policy.authorizer)}
    assert narrowed == set(PAGE_READERS)


@pytest.mark.parametrize("name", sorted(PAGE_READERS))
def test_a_narrowed_page_shows_to_its_readers_only(name, people):
    url = reverse(name)
    signed_out = Client().get(url)
    assert signed_out.status_code == 302 and signed_out["Location"].startswith(reverse("login")), signed_out
    for role in ROLES:
        client = page_client(people[role][0])
        for extra in ({}, HX):
            expected = 200 if role in PAGE_READERS[name] else 403
            assert client.get(url, **extra).status_code == expected, (name, role, extra)


# ---------------------------------------------------------------- the admin

def test_the_admin_writes_the_ledger_only_through_its_services():
    """Every ledger and knowledge model is read-only in the admin (no add, change or delete, even for a
    superuser); a token is revoked there by ``ledger.auth.token_revoke``, which audits it."""
    boss, _ = make_operator("owner")
    boss.is_staff = boss.is_superuser = True
    boss.save(update_fields=["is_staff", "is_superuser"])
    request = RequestFactory().get("/admin/")
    request.user = boss
    writable = [f"{model._meta.label}: {verb}" for model, model_admin in admin.site._registry.items()
                if model._meta.app_label in ("ledger", "knowledge")
                for verb in ("add", "change", "delete")
                if getattr(model_admin, f"has_{verb}_permission")(request, *(() if verb == "add" else (None,)))]
    assert not writable, writable
    assert {m._meta.label for m in admin.site._registry} >= {"ledger.Workflow", "ledger.Agent", "ledger.ApiToken"}
    agent, _ = make_agent()
    token = ApiToken.objects.get(user=agent)
    client = page_client(boss)
    workflow = make_workflow()
    changed = client.post(f"/admin/ledger/workflow/{workflow.id}/change/", {"title": "changed"})
    assert changed.status_code == 403 and Workflow.objects.get(id=workflow.id).title != "changed"
    revoked = client.post("/admin/ledger/apitoken/", {"action": "revoke", "_selected_action": [token.id]})
    assert revoked.status_code == 302 and ApiToken.objects.get(id=token.id).revoked_at is not None
    entry = AuditEntry.objects.get(action="token_revoke")
    assert (entry.outcome, entry.actor, entry.target) == ("done", f"user:{boss.username}",
                                                          f"{agent.username}:{token.prefix}")
