"""The middleware only browsers need (a session, its CSRF check, the signed-in user, flash messages),
passed over for API calls that carry a token: those are authenticated by the token alone, in the policy
pipeline (``ledger.auth``), and answered without reading or writing a session. Every other request, an
API call signed in by its session included, passes through each of them as before."""

from django.contrib.auth import middleware as auth
from django.contrib.messages import middleware as messages
from django.contrib.sessions import middleware as sessions
from django.middleware import csrf

API_PREFIX = "/api/"
TOKEN_SCHEMES = ("token ", "bearer ")


def carries_api_token(request) -> bool:
    """An API call whose ``Authorization`` names a token: the token authenticator decides it (a valid
    token's user, else 401), so no session is ever consulted for it."""
    return request.path_info.startswith(API_PREFIX) and \
        request.META.get("HTTP_AUTHORIZATION", "")[:7].lower().startswith(TOKEN_SCHEMES)


def _for_browsers(middleware):
    class ForBrowsers(middleware):
        def __call__(self, request):
            if carries_api_token(request):
                return self.get_response(request)
            return super().__call__(request)

        if hasattr(middleware, "process_view"):
            def process_view(self, request, *args):
                return None if carries_api_token(request) else super().process_view(request, *args)

    ForBrowsers.__name__ = ForBrowsers.__qualname__ = middleware.__name__
    return ForBrowsers


SessionMiddleware = _for_browsers(sessions.SessionMiddleware)
CsrfViewMiddleware = _for_browsers(csrf.CsrfViewMiddleware)
AuthenticationMiddleware = _for_browsers(auth.AuthenticationMiddleware)
MessageMiddleware = _for_browsers(messages.MessageMiddleware)
