"""Single sign-on with OpenID Connect (SPEC §17): the authorization-code flow with PKCE, by Authlib's
Django client. It reads the issuer's discovery document, keeps the state, the nonce and the PKCE verifier
in the session, and checks the ID token: its signature by the issuer's JWKS, ``iss`` (the configured
issuer), ``aud`` (our client id: given here, as Authlib alone would let an ``azp`` stand for it), ``exp``
and ``nonce``. Who the person is, and their roles, is ``ledger.identities_sso``'s."""

from __future__ import annotations

from urllib.parse import urlencode

import requests
from authlib.integrations.base_client import OAuthError
from authlib.integrations.django_client import OAuth
from django.conf import settings
from django.contrib.auth import login
from django.http import Http404
from django.shortcuts import redirect
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET
from joserfc.errors import JoseError

from ledger.identities_sso import sso_groups, sso_name, sso_sign_in
from ledger.services import audit_record
from stateboard.errors import DomainError, Refused
from stateboard.policy import PUBLIC, Policy, client_address, page
from stateboard.signin import SSO_END_SESSION, sso_offered

SCOPES = "openid profile email"
NEXT = "sso_next"  # the session key: where to go once signed in
BACKEND = "stateboard.signin.PasswordBackend"  # the session's backend: it finds the user, it checks no password
_clients: dict[tuple, object] = {}  # one client per configuration (it caches the discovery document and the JWKS)


def _address_keys(request) -> list[str]:
    return [f"address:{client_address(request)}"]


# Counted per client address under API_RATE_LIMITS' `login` class, as password sign-in is.
SSO = Policy(roles=PUBLIC, rate="login", rate_keys=_address_keys, audit="sign_in")


def sso_client():
    """The Authlib client of the configured issuer (404 when single sign-on is not configured)."""
    if not sso_offered():
        raise Http404("Single sign-on is not configured.")
    key = (settings.OIDC_ISSUER, settings.OIDC_CLIENT_ID, settings.OIDC_CLIENT_SECRET)
    client = _clients.get(key)
    if client is None:
        client = OAuth().register(
            "stateboard", client_id=settings.OIDC_CLIENT_ID, client_secret=settings.OIDC_CLIENT_SECRET,
            server_metadata_url=f"{settings.OIDC_ISSUER.rstrip('/')}/.well-known/openid-configuration",
            client_kwargs={"scope": SCOPES, "code_challenge_method": "S256", "default_timeout": 10})
        _clients.clear()
        _clients[key] = client
    return client


def _metadata(client) -> dict:
    """The discovery document; its issuer must be the configured one."""
    try:
        metadata = client.load_server_metadata()
    except (requests.RequestException, ValueError) as exc:
        raise DomainError("sso_unavailable", "The identity provider does not answer; try again later.",
                          status_code=503) from exc
    if str(metadata.get("issuer", "")).rstrip("/") != settings.OIDC_ISSUER.rstrip("/"):
        raise DomainError("sso_misconfigured", "The identity provider's discovery document names another issuer.",
                          status_code=503)
    return metadata


@require_GET
@page(SSO, back="login")
def sso_start(request):
    """Off to the issuer's authorization endpoint (the state, nonce and PKCE verifier kept in the session)."""
    client = sso_client()
    _metadata(client)
    target = request.GET.get("next") or ""
    request.session[NEXT] = target if target.startswith("/") and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()) else ""
    return client.authorize_redirect(request, request.build_absolute_uri(reverse("ledger:sso_callback")))


def _refuse(request, code: str, detail: str, *, name: str = "", groups=()):
    """A refused single sign-on: audited (nothing else written), then the 403 page."""
    audit_record(user=None, actor=f"sso:{name}" if name else f"anonymous:{client_address(request)}",
                 action="sign_in", outcome="refused", code=code, reason=detail,
                 data={"via": "sso", "groups": list(groups)})
    raise Refused(code, detail)


@require_GET
@page(SSO, back="login")
def sso_callback(request):
    """The issuer's answer: the code exchanged (with the PKCE verifier), the ID token checked, the person
    signed in with the roles their groups map to — or refused (403), nothing created."""
    client = sso_client()
    metadata = _metadata(client)
    issuer = metadata["issuer"]
    options = {"iss": {"essential": True, "values": [issuer]},
               "aud": {"essential": True, "values": [settings.OIDC_CLIENT_ID]}, "exp": {"essential": True}}
    try:
        token = client.authorize_access_token(request, claims_options=options)
    except (OAuthError, JoseError, ValueError, KeyError, RuntimeError) as exc:  # RuntimeError: no jwks_uri
        _refuse(request, "sso_invalid", f"The single sign-on answer was refused ({exc.__class__.__name__}).")
    except requests.RequestException as exc:
        raise DomainError("sso_unavailable", "The identity provider does not answer; try again later.",
                          status_code=503) from exc
    claims = token.get("userinfo")
    if not claims:
        _refuse(request, "sso_invalid", "The identity provider sent no ID token.")
    try:
        user, roles, groups, _ = sso_sign_in(issuer=settings.OIDC_ISSUER, claims=claims)
    except Refused as exc:
        _refuse(request, exc.code, exc.detail, name=sso_name(claims), groups=sso_groups(claims))
    target = request.session.pop(NEXT, "")
    login(request, user, backend=BACKEND)
    end_session = metadata.get("end_session_endpoint")
    if end_session:
        request.session[SSO_END_SESSION] = f"{end_session}?" + urlencode({
            "id_token_hint": token.get("id_token", ""), "client_id": settings.OIDC_CLIENT_ID,
            "post_logout_redirect_uri": request.build_absolute_uri(reverse("login"))})
    audit_record(user=user, action="sign_in", outcome="done", target=str(claims["sub"])[:200],
                 data={"via": "sso", "issuer": settings.OIDC_ISSUER, "roles": roles, "groups": groups})
    return redirect(target or settings.LOGIN_REDIRECT_URL)
