"""Sign-in behind the policy pipeline: Django's login form (and the admin's), rate-limited per user name
and per client address by the one limiter (``stateboard.policy.throttle_check``), a lockout audited.

Single sign-on (SPEC §17) is the ledger's (``ledger/web/sso.py``); here, what it changes for passwords and
sign-out: ``OIDC_ONLY`` refuses every password (``PasswordBackend``, the admin's form too; agents' tokens are
not passwords), and sign-out ends the session at the issuer too when the sign-in left its end-session URL."""

from django.conf import settings
from django.contrib.auth import forms as auth_forms
from django.contrib.auth import views as auth_views
from django.contrib.auth.backends import ModelBackend
from django.core.exceptions import ValidationError
from django.http import HttpResponseRedirect

from stateboard.policy import PUBLIC, Policy, client_address, page

SSO_END_SESSION = "sso_end_session"  # the session key: the issuer's end-session URL for this sign-in
PASSWORDS_OFF = "Password sign-in is turned off here: sign in with single sign-on."


def sso_offered() -> bool:
    return bool(settings.OIDC_ISSUER and settings.OIDC_CLIENT_ID and settings.OIDC_CLIENT_SECRET)


class PasswordBackend(ModelBackend):
    """Django's backend, but with ``OIDC_ONLY`` no password signs anyone in (a session already made, by
    single sign-on or before, still finds its user)."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        if settings.OIDC_ONLY:
            return None
        return super().authenticate(request, username=username, password=password, **kwargs)


class SignInForm(auth_forms.AuthenticationForm):
    def clean(self):
        if settings.OIDC_ONLY:
            raise ValidationError(PASSWORDS_OFF, code="passwords_off")
        return super().clean()


def sign_in_keys(request) -> list[str]:
    """A sign-in attempt counts against the client's address and against the user name it tries (so
    neither many names from one address nor one name from many addresses gets more tries); showing the
    form counts nowhere."""
    if request.method != "POST":
        return []
    name = "".join(ch for ch in request.POST.get("username", "") if ch.isprintable())  # (no NUL in the audit)
    return [f"address:{client_address(request)}", f"name:{name.strip().casefold()[:150]}"]


# API_RATE_LIMITS' `login` class (unnamed: anon's rate); a key over it is locked out for the rest of the
# window, and the lockout is audited once (`sign_in`, refused, `locked_out`).
SIGN_IN = Policy(roles=PUBLIC, rate="login", rate_keys=sign_in_keys, audit="sign_in")


class SignInView(auth_views.LoginView):
    policy = SIGN_IN
    form_class = SignInForm

    def get_context_data(self, **kwargs):
        return super().get_context_data(sso_offered=sso_offered(), passwords_off=settings.OIDC_ONLY, **kwargs)


sign_in = page(SIGN_IN)(SignInView.as_view())


class SignOutView(auth_views.LogoutView):
    """Django's sign-out (POST only); after a single sign-on, on to the issuer's end-session endpoint."""

    def post(self, request, *args, **kwargs):
        end_session = request.session.get(SSO_END_SESSION)
        response = super().post(request, *args, **kwargs)
        if end_session and response.status_code in (301, 302):
            return HttpResponseRedirect(end_session)
        return response


sign_out = SignOutView.as_view()
