"""OpenID Connect providers for the single sign-on tests (SPEC §17), each on a free 127.0.0.1 port.

``mock_provider``: the real ``oidc-provider-mock`` in a process of its own; a test sets a person's claims
(``PUT /users/<sub>``) and signs them in through its authorization form. It issues valid tokens only, so
``SigningProvider`` serves tokens the test signs itself — a forged signature, an expired token, a wrong
``nonce``, ``aud`` or ``iss`` — from a discovery document, a JWKS and a token endpoint of its own, and
checks the PKCE verifier against the challenge it was sent."""

from __future__ import annotations

import base64
import hashlib
import json
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
from joserfc import jwt
from joserfc.jwk import RSAKey


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def mock_provider():
    """``oidc-provider-mock`` (nonces required) in its own process; yields its issuer URL."""
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "oidc_provider_mock", "--port", str(port),
                                "--require-nonce", "true"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    issuer = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx.get(f"{issuer}/.well-known/openid-configuration", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"oidc-provider-mock did not start (exit {process.poll()})")
            time.sleep(0.1)
        yield issuer
    finally:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def provider_user(issuer: str, sub: str, claims: dict) -> None:
    """Set the claims the mock provider gives ``sub`` (its ``PUT /users/<sub>``)."""
    answer = httpx.put(f"{issuer}/users/{sub}", json=claims, timeout=5)
    assert answer.status_code == 204, answer.text


def http_client() -> httpx.Client:
    """A real HTTP client following redirects; no kept-alive connection holds a live server's thread (and its
    database connection) past the test."""
    return httpx.Client(follow_redirects=True, timeout=10, headers={"Connection": "close"})


def sign_in_at_mock(app_url: str, sub: str, client: httpx.Client | None = None) -> tuple[httpx.Client, httpx.Response]:
    """Single sign-on through the mock provider's form with a real HTTP client following redirects:
    the app's start, the provider's authorization form (answered as ``sub``), the app's callback."""
    client = client or http_client()
    form = client.get(f"{app_url}/login/sso/")
    assert form.status_code == 200 and form.url.path == "/oauth2/authorize", (form.status_code, form.url)
    return client, client.post(str(form.url), data={"sub": sub})


class SigningProvider:
    """A provider whose ID tokens the test signs: ``mode`` says how (``valid``, ``forged``: signed by a key
    not in its JWKS, under the JWKS key's id; ``expired``; ``wrong_nonce``; ``wrong_aud``; ``wrong_iss``)."""

    def __init__(self, client_id: str, *, end_session: bool = False):
        self.client_id, self.end_session = client_id, end_session
        self.key = RSAKey.generate_key(2048, parameters={"kid": "signing-1"})
        self.forger = RSAKey.generate_key(2048, parameters={"kid": "signing-1"})
        self.mode, self.claims = "valid", {}
        self.seen: dict = {}  # the last authorization request's parameters, the PKCE check's result
        self.port = free_port()
        self.issuer = f"http://127.0.0.1:{self.port}"
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    def discovery(self) -> dict:
        document = {"issuer": self.issuer, "authorization_endpoint": f"{self.issuer}/authorize",
                    "token_endpoint": f"{self.issuer}/token", "jwks_uri": f"{self.issuer}/jwks",
                    "response_types_supported": ["code"], "subject_types_supported": ["public"],
                    "id_token_signing_alg_values_supported": ["RS256"]}
        if self.end_session:
            document["end_session_endpoint"] = f"{self.issuer}/end_session"
        return document

    def id_token(self) -> str:
        now = int(time.time())
        claims = {"iss": self.issuer, "aud": self.client_id, "iat": now, "exp": now + 300,
                  "nonce": self.seen.get("nonce"), **self.claims}
        if self.mode == "expired":
            claims.update(iat=now - 7200, exp=now - 3600)
        elif self.mode == "wrong_nonce":
            claims["nonce"] = "not-the-nonce-sent"
        elif self.mode == "wrong_aud":
            claims.update(aud="another-client", azp=self.client_id)
        elif self.mode == "wrong_iss":
            claims["iss"] = "http://127.0.0.1:1"
        key = self.forger if self.mode == "forged" else self.key
        return jwt.encode({"alg": "RS256", "kid": "signing-1"}, claims, key)

    def _handler(self):
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _json(self, body: dict, status: int = 200):
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                url = urlsplit(self.path)
                if url.path == "/.well-known/openid-configuration":
                    return self._json(provider.discovery())
                if url.path == "/jwks":
                    return self._json({"keys": [provider.key.as_dict(private=False)]})
                if url.path == "/authorize":
                    query = {k: v[0] for k, v in parse_qs(url.query).items()}
                    provider.seen = dict(query)
                    self.send_response(302)
                    self.send_header("Location", f"{query['redirect_uri']}?"
                                     + urlencode({"code": "the-code", "state": query["state"]}))
                    self.end_headers()
                    return None
                self._json({"error": "not_found"}, 404)

            def do_POST(self):
                body = {k: v[0] for k, v in parse_qs(self.rfile.read(int(self.headers["Content-Length"])).decode()).items()}
                if urlsplit(self.path).path != "/token" or body.get("code") != "the-code":
                    return self._json({"error": "invalid_grant"}, 400)
                verifier = body.get("code_verifier", "")
                challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
                provider.seen["pkce_ok"] = bool(verifier) and challenge == provider.seen.get("code_challenge")
                return self._json({"access_token": "an-access-token", "token_type": "Bearer", "expires_in": 300,
                                   "id_token": provider.id_token()})

        return Handler
