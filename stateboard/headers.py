"""Pages load nothing from outside the server (SPEC §11.4): one Content-Security-Policy on every HTML answer."""

from urllib.parse import urlsplit

from django.conf import settings

from stateboard.signin import SSO_END_SESSION

PAGE_POLICY = ("default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; object-src 'none'; "
               "base-uri 'self'; form-action 'self'; frame-ancestors 'none'")
# The API docs (Swagger UI from drf-spectacular-sidecar, served by this server) start with an inline script.
DOCS_POLICY = PAGE_POLICY.replace("default-src 'self'", "default-src 'self'; script-src 'self' 'unsafe-inline'")


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if response.get("Content-Type", "").startswith("text/html") and "Content-Security-Policy" not in response:
            docs = request.path.startswith(settings.API_DOCS_PATH)
            policy = DOCS_POLICY if docs else PAGE_POLICY
            end_session = _end_session_origin(request)
            if end_session:  # sign-out's form redirects there (SPEC §17): a browser holds redirects to form-action
                policy = policy.replace("form-action 'self'", f"form-action 'self' {end_session}")
            response["Content-Security-Policy"] = policy
        return response


def _end_session_origin(request) -> str:
    """The origin of the issuer's end-session endpoint, for a session signed in by single sign-on."""
    session = getattr(request, "session", None)
    url = session.get(SSO_END_SESSION) if session is not None else None
    if not url:
        return ""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc or any(c in parts.netloc for c in " ;,'\""):
        return ""
    return f"{parts.scheme}://{parts.netloc}"
