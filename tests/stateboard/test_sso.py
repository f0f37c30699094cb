"""Single sign-on with OpenID Connect (SPEC §17), against real providers on 127.0.0.1 and the app on a live
server, driven by a real HTTP client: the person matched by (issuer, ``sub``) and created at first sign-in,
roles from ``OIDC_ROLE_MAP`` only and recomputed at each sign-in, approver groups apart from roles, refusals
that create nothing (no mapped role, a forged or expired ID token, a wrong ``nonce``, ``aud`` or ``iss``),
sign-out there too, ``OIDC_ONLY``."""

import re
import subprocess
import sys

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management import CommandError, call_command
from django.test import Client

from ledger.models import ApproverGroup, AuditEntry, SsoIdentity
from stateboard.roles import user_roles
from tests.factories import client_for, make_agent, make_operator, unique
from tests.stateboard.sso_providers import SigningProvider, http_client, mock_provider, provider_user, sign_in_at_mock

CLIENT_ID, CLIENT_SECRET = "stateboard-test", "sso-test-secret"
ROLE_MAP = {"deployers": "editor", "pager": "oncall"}
CSRF = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


@pytest.fixture(scope="module")
def idp():
    with mock_provider() as issuer:
        yield issuer


def _configure(settings, issuer: str) -> None:
    settings.OIDC_ISSUER, settings.OIDC_CLIENT_ID, settings.OIDC_CLIENT_SECRET = issuer, CLIENT_ID, CLIENT_SECRET
    settings.OIDC_ROLE_MAP = ROLE_MAP


@pytest.fixture
def sso(settings, live_server, idp):
    """The app on a live server, configured for the mock provider; returns the app's URL."""
    _configure(settings, idp)
    return live_server.url


def _rows() -> tuple:
    User = get_user_model()
    return (User.objects.count(), SsoIdentity.objects.count(), ApproverGroup.objects.count(),
            User.groups.through.objects.count(), ApproverGroup.members.through.objects.count())


def _person(sub: str):
    return SsoIdentity.objects.select_related("user").get(sub=sub).user


def _roles(user) -> set:
    return set(user_roles(get_user_model().objects.get(pk=user.pk)))


def _approver_groups(user) -> set:
    return set(user.approver_groups.values_list("name", flat=True))


def test_first_sign_in_creates_the_person_and_a_removed_group_takes_its_role_away(sso, idp):
    taken = make_operator("viewer", name=unique("ada"))[0].username  # the preferred name is someone's already
    sub = unique("sub")
    provider_user(idp, sub, {"preferred_username": taken, "email": "ada@example.org",
                             "groups": ["deployers", "pager", "owner", "release-approvers"]})
    client, answer = sign_in_at_mock(sso, sub)
    assert answer.status_code == 200 and answer.url.path == "/", (answer.status_code, answer.url)
    person = _person(sub)
    assert person.username == f"{taken}-2" and person.email == "ada@example.org"
    assert not person.has_usable_password()
    assert _roles(person) == {"editor", "oncall"}  # the IdP's `owner` group is no role: the map does not name it
    assert _approver_groups(person) == {"deployers", "pager", "owner", "release-approvers"}
    assert not Group.objects.filter(name="release-approvers").exists()
    assert SsoIdentity.objects.get(sub=sub).issuer == idp
    entry = AuditEntry.objects.get(action="sign_in", outcome="done", actor=f"user:{person.username}")
    assert entry.data["via"] == "sso" and entry.data["roles"] == ["editor", "oncall"] and entry.role == "editor,oncall"
    assert client.get(f"{sso}/approvals/").status_code == 200  # the session is the person's

    provider_user(idp, sub, {"preferred_username": taken, "groups": ["pager"]})  # left the deployers
    _, again = sign_in_at_mock(sso, sub)
    assert again.status_code == 200 and again.url.path == "/"
    assert _person(sub).pk == person.pk and SsoIdentity.objects.filter(sub=sub).count() == 1
    assert _roles(person) == {"oncall"}
    assert _approver_groups(person) == {"pager"}
    assert AuditEntry.objects.filter(action="sign_in", outcome="done", actor=f"user:{person.username}").count() == 2


def test_no_mapped_role_is_refused_and_creates_nothing(sso, idp):
    """Groups named like roles (`owner`, `editor`) that the map does not name: 403, no user, group membership
    or identity row; the refusal is audited."""
    sub = unique("sub")
    provider_user(idp, sub, {"preferred_username": "mallory", "groups": ["owner", "editor", "everyone"]})
    before = _rows()
    _, answer = sign_in_at_mock(sso, sub)
    assert answer.status_code == 403 and "no role" in answer.text
    assert _rows() == before
    assert not get_user_model().objects.filter(username__startswith="mallory").exists()
    refused = AuditEntry.objects.get(action="sign_in", outcome="refused", actor="sso:mallory")
    assert refused.code == "sso_no_role" and refused.data["via"] == "sso"


def test_a_known_person_whose_roles_are_all_gone_is_refused_and_keeps_nothing_new(sso, idp):
    sub = unique("sub")
    provider_user(idp, sub, {"preferred_username": unique("bo"), "groups": ["deployers"]})
    assert sign_in_at_mock(sso, sub)[1].status_code == 200
    person = _person(sub)
    provider_user(idp, sub, {"groups": ["owner"]})
    client, refused = sign_in_at_mock(sso, sub)
    assert refused.status_code == 403
    assert client.get(f"{sso}/approvals/", follow_redirects=False).status_code == 302  # not signed in
    assert _roles(person) == {"editor"}  # unchanged until a sign-in succeeds; refused ones change nothing


def test_sign_out_ends_the_session_and_at_the_issuer(sso, idp):
    sub = unique("sub")
    provider_user(idp, sub, {"preferred_username": unique("cy"), "groups": ["pager"]})
    client, answer = sign_in_at_mock(sso, sub)
    token = CSRF.search(answer.text).group(1)
    # a browser holds a form's redirects to its page's form-action: the issuer's origin is allowed, for this session
    assert f"form-action 'self' {idp};" in answer.headers["content-security-policy"]
    out = client.post(f"{sso}/logout/", data={"csrfmiddlewaretoken": token}, follow_redirects=False)
    assert out.status_code == 302
    assert out.headers["location"].startswith(f"{idp}/oauth2/end_session?"), out.headers["location"]
    assert "id_token_hint=" in out.headers["location"] and "post_logout_redirect_uri=" in out.headers["location"]
    assert client.get(f"{sso}/approvals/", follow_redirects=False).status_code == 302  # ended here too
    assert httpx.get(out.headers["location"], timeout=5).status_code == 200  # the issuer's end-session page


# ---------------------------------------------------------------- tokens the test signs

@pytest.fixture
def signing(settings, live_server):
    with SigningProvider(CLIENT_ID) as provider:
        _configure(settings, provider.issuer)
        settings.OIDC_GROUPS_CLAIM = "idp_groups"
        provider.url = live_server.url
        yield provider


def _sign_in_signed(provider, query: str = "") -> tuple[httpx.Client, httpx.Response]:
    client = http_client()
    return client, client.get(f"{provider.url}/login/sso/{query}")


def test_a_valid_signed_token_signs_in_with_pkce_and_the_configured_groups_claim(signing):
    """The control for the refusals below: the same provider, a valid token, is let in. The request used
    PKCE (S256, the verifier matched), the scopes `openid profile email`, a nonce; the groups came from
    OIDC_GROUPS_CLAIM. Without an end-session endpoint, sign-out ends the session here only."""
    sub = unique("sub")
    signing.claims = {"sub": sub, "idp_groups": ["deployers"], "groups": ["pager"]}
    client, answer = _sign_in_signed(signing)
    assert answer.status_code == 200 and answer.url.path == "/", answer.text[:300]
    assert signing.seen["code_challenge_method"] == "S256" and signing.seen["pkce_ok"] is True
    assert signing.seen["scope"] == "openid profile email" and signing.seen["nonce"]
    person = _person(sub)
    assert person.username == sub  # no preferred_username: the sub
    assert "form-action 'self';" in answer.headers["content-security-policy"]  # no end-session endpoint
    assert _roles(person) == {"editor"}
    out = client.post(f"{signing.url}/logout/", data={"csrfmiddlewaretoken": CSRF.search(answer.text).group(1)},
                      follow_redirects=False)
    assert out.status_code == 302 and out.headers["location"] == "/login/"


def test_the_page_asked_for_is_where_single_sign_on_lands_when_it_is_ours(signing):
    signing.claims = {"sub": unique("sub"), "idp_groups": ["deployers"]}
    assert _sign_in_signed(signing, "?next=/approvals/")[1].url.path == "/approvals/"
    signing.claims = {"sub": unique("sub"), "idp_groups": ["deployers"]}
    elsewhere = _sign_in_signed(signing, "?next=//elsewhere.example/")[1]
    assert elsewhere.url.host == "localhost" and elsewhere.url.path == "/"


def test_a_discovery_document_naming_another_issuer_is_not_followed(signing, settings):
    """The same provider reached as `localhost`: its document names 127.0.0.1, so nothing is asked of it."""
    settings.OIDC_ISSUER = signing.issuer.replace("127.0.0.1", "localhost")
    answer = http_client().get(f"{signing.url}/login/sso/")
    assert answer.url.path == "/login/" and "names another issuer" in answer.text
    assert "nonce" not in signing.seen


@pytest.mark.parametrize("mode", ["forged", "expired", "wrong_nonce", "wrong_aud", "wrong_iss"])
def test_an_id_token_that_fails_a_check_is_refused_and_creates_nothing(signing, mode):
    signing.mode = mode
    signing.claims = {"sub": unique("sub"), "preferred_username": "eve", "idp_groups": ["deployers"]}
    before = _rows()
    _, answer = _sign_in_signed(signing)
    assert answer.status_code == 403, (mode, answer.status_code, answer.url)
    assert _rows() == before
    refused = AuditEntry.objects.filter(action="sign_in", outcome="refused", code="sso_invalid")
    assert refused.count() == 1 and refused.get().data["via"] == "sso"


def test_a_callback_without_its_state_is_refused(signing):
    """An answer the session did not ask for (no state of its own): refused, nothing created."""
    before = _rows()
    answer = httpx.get(f"{signing.url}/login/sso/callback/?code=the-code&state=forged", timeout=10)
    assert answer.status_code == 403 and _rows() == before


# ---------------------------------------------------------------- without a provider


@pytest.mark.django_db
def test_without_configuration_no_single_sign_on_is_offered(settings):
    settings.OIDC_ISSUER = ""
    assert Client().get("/login/sso/").status_code == 404
    page = Client().get("/login/").content.decode()
    assert "single sign-on" not in page and 'name="password"' in page


@pytest.mark.django_db
def test_a_provider_that_does_not_answer_sends_back_to_sign_in_with_a_message(settings):
    _configure(settings, "http://127.0.0.1:9")  # the discard port: nothing listens
    answer = Client().get("/login/sso/", follow=True)
    assert answer.redirect_chain[-1][0] == "/login/" and "does not answer" in answer.content.decode()


@pytest.mark.django_db
def test_oidc_only_refuses_passwords_for_people_but_not_agents_tokens(settings):
    _configure(settings, "http://127.0.0.1:9")
    user, _ = make_operator("editor")
    user.set_password("a-password-1")
    user.save(update_fields=["password"])
    agent, token = make_agent()
    assert Client().post("/login/", {"username": user.username, "password": "a-password-1"}).status_code == 302
    settings.OIDC_ONLY = True
    page = Client().get("/login/").content.decode()
    assert "Sign in with single sign-on" in page and 'name="password"' not in page
    client = Client()
    refused = client.post("/login/", {"username": user.username, "password": "a-password-1"})
    assert refused.status_code == 200 and "Password sign-in is turned off" in refused.content.decode()
    assert client.get("/approvals/").status_code == 302
    admin = Client().post("/admin/login/", {"username": user.username, "password": "a-password-1"})
    assert admin.status_code == 200 and "_auth_user_id" not in admin.client.session
    assert client_for(token).get("/api/v1/runs/").status_code == 200  # agents keep their tokens
    with pytest.raises(CommandError, match="OIDC_ONLY"):
        call_command("create_operator", unique("pw"), role="viewer", password="secret-pw-1")
    call_command("create_operator", name := unique("nopw"), role="viewer")  # without a password: fine
    assert get_user_model().objects.filter(username=name).exists()


@pytest.mark.slow  # a Python process of its own per case
@pytest.mark.parametrize(("env", "message"), [({"OIDC_ROLE_MAP": '{"deployers": "admin"}'}, "OIDC_ROLE_MAP"),
                                              ({"OIDC_ROLE_MAP": '["editor"]'}, "OIDC_ROLE_MAP"),
                                              ({"OIDC_ONLY": "1"}, "OIDC_ONLY")])
def test_a_wrong_configuration_stops_the_start(env, message):
    import os
    environ = {k: v for k, v in os.environ.items() if not k.startswith("OIDC_")} | env
    started = subprocess.run([sys.executable, "-c", "import stateboard.settings"], env=environ,
                             capture_output=True, text=True, timeout=60)
    assert started.returncode != 0 and "ImproperlyConfigured" in started.stderr and message in started.stderr


# ---------------------------------------------------------------- the person, without a provider

@pytest.mark.django_db
def test_groups_roles_and_names_are_read_from_the_claims_as_the_contract_says(settings):
    from ledger.identities_sso import sso_groups, sso_name, sso_roles, sso_sign_in
    from stateboard.errors import Refused

    settings.OIDC_ROLE_MAP = ROLE_MAP | {"staff": "viewer"}
    assert sso_groups({"groups": "pager"}) == ["pager"]  # a lone name
    assert sso_groups({"groups": ["pager", 7, None, " ", "pager", "owner"]}) == ["owner", "pager"]
    assert sso_groups({"groups": {"pager": True}}) == [] and sso_groups({}) == []
    assert sso_roles(["owner", "editor", "staff", "pager"]) == ["oncall", "viewer"]
    assert sso_name({"preferred_username": " \t", "sub": "s 1"}) == "s1"
    with pytest.raises(Refused) as refused:
        sso_sign_in(issuer="https://idp.example", claims={"sub": "x", "groups": ["owner", "editor"]})
    assert refused.value.code == "sso_no_role" and not SsoIdentity.objects.exists()
    agent, _ = make_agent()  # an identity row naming an agent: never signed in by single sign-on
    SsoIdentity.objects.create(user=agent, issuer="https://idp.example", sub="agent-sub")
    with pytest.raises(Refused) as refused:
        sso_sign_in(issuer="https://idp.example", claims={"sub": "agent-sub", "groups": ["staff"]})
    assert refused.value.code == "sso_not_a_person" and not agent.groups.filter(name="viewer").exists()
    user, roles, groups, created = sso_sign_in(issuer="https://other.example", claims={"sub": "agent-sub",
                                                                                     "groups": ["staff"]})
    assert created and user.pk != agent.pk and roles == ["viewer"]  # (issuer, sub): another issuer's is another


@pytest.mark.django_db
def test_the_same_persons_first_sign_in_twice_at_once_makes_one_person(settings, monkeypatch):
    """The other sign-in created them between this one's look and its insert: the insert fails on (issuer,
    sub), nothing of this attempt stays, and the second look signs in as the person the other one made."""
    from ledger import identities_sso

    settings.OIDC_ROLE_MAP = ROLE_MAP
    claims = {"sub": "raced", "preferred_username": "raced", "groups": ["pager"]}
    first, _, _, _ = identities_sso.sso_sign_in(issuer="https://idp.example", claims=claims)
    looks = []
    real = identities_sso._identity

    def late(issuer, sub):  # the first look happens before the other sign-in's commit
        looks.append(sub)
        return None if len(looks) == 1 else real(issuer, sub)

    monkeypatch.setattr(identities_sso, "_identity", late)
    users = get_user_model().objects.count()
    again, roles, _, created = identities_sso.sso_sign_in(issuer="https://idp.example", claims=claims)
    assert (again.pk, roles, created, len(looks)) == (first.pk, ["oncall"], False, 2)
    assert get_user_model().objects.count() == users and SsoIdentity.objects.filter(sub="raced").count() == 1
