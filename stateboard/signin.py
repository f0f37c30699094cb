"""Sign-in behind the policy pipeline: Django's login form (and the admin's), rate-limited per user name
and per client address by the one limiter (``stateboard.policy.throttle_check``), a lockout audited."""

from django.contrib.auth import views as auth_views

from stateboard.policy import PUBLIC, Policy, client_address, page


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


sign_in = page(SIGN_IN)(SignInView.as_view())
