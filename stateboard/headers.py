"""Pages load nothing from outside the server (SPEC §11.4): one Content-Security-Policy on every HTML answer."""

from django.conf import settings

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
            response["Content-Security-Policy"] = DOCS_POLICY if docs else PAGE_POLICY
        return response
