"""stateboard.redact: each of the secret shapes is masked, in text and in links; ordinary text (a git SHA
included) is left alone, and redaction stays fast."""

import time

import pytest

from ledger.web.common import evidence_view
from stateboard.redact import redact, redact_data, redact_json

PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7\nabc\n-----END RSA PRIVATE KEY-----"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
JWT = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
GIT_SHA = "3f786850e387550fdab836ed7e6dc881de23001b"
LOGS = "https://logs.example.com/view?line="  # a link that carries the text as it was logged

# name: (text holding the secret, the secret, a link holding it)
SECRETS = {
    # What was redacted before issue 39.13 (and stays so).
    "aws_access_key": ("key AKIAIOSFODNN7EXAMPLE in env", "AKIAIOSFODNN7EXAMPLE",
                       "https://b.s3.example.com/o?AWSAccessKeyId=AKIAIOSFODNN7EXAMPLE&Expires=1"),
    "pem": (f"dump {PEM} end", "MIIEowIBAAKCAQEA7", LOGS + PEM),
    "bearer": ("curl -H 'Authorization: Bearer eyJhbGciOi.J9x-y_z' /api", "eyJhbGciOi.J9x-y_z",
               LOGS + "Bearer eyJhbGciOi.J9x-y_z"),
    "password_eq": ("db url?user=app&password=hunter2&x=1", "hunter2", "https://db.example.com/?password=hunter2&x=1"),
    "password_colon": ("password: hunter2 then", "hunter2", LOGS + "password:hunter2"),
    "query_token": ("GET /feed?token=f00dfeed42 200", "f00dfeed42", "https://api.example.com/feed?token=f00dfeed42"),
    "query_access_token": ("got ?access_token=ya29.a0Af&scope=x", "ya29.a0Af",
                           "https://api.example.com/me?access_token=ya29.a0Af&scope=x"),
    "x_amz_signature": ("signed ?X-Amz-Signature=9f0e1d2c3b4a&X-Amz-Date=1", "9f0e1d2c3b4a",
                        "https://b.s3.amazonaws.com/k?X-Amz-Signature=9f0e1d2c3b4a&X-Amz-Date=1"),
    "github_classic": ("push with ghp_1234567890abcdefghij1234567890abcd", "ghp_1234567890abcdefghij1234567890abcd",
                       "https://ghp_1234567890abcdefghij1234567890abcd@github.com/o/r.git"),
    "github_fine_grained": ("github_pat_11ABCDEFG0123456789_abcdefghijklmnop ok",
                            "github_pat_11ABCDEFG0123456789_abcdefghijklmnop",
                            LOGS + "github_pat_11ABCDEFG0123456789_abcdefghijklmnop"),
    "slack_bot": ("SLACK=xoxb-153445930147-Tjy11gGxUW6Cf99YOYwtzG0K", "Tjy11gGxUW6Cf99YOYwtzG0K",
                  LOGS + "xoxb-153445930147-Tjy11gGxUW6Cf99YOYwtzG0K"),
    "openai": ("OPENAI_API_KEY sk-proj-abcdefghijklmnop1234", "sk-proj-abcdefghijklmnop1234",
               LOGS + "sk-proj-abcdefghijklmnop1234"),
    # What issue 39.13 found unredacted.
    "aws_secret_named": (f"aws_secret_access_key={AWS_SECRET}", AWS_SECRET,
                         LOGS + f"aws_secret_access_key={AWS_SECRET}"),
    "aws_secret_bare": (f"creds AKIA… / {AWS_SECRET} rotated", AWS_SECRET, LOGS + AWS_SECRET),
    "aws_secret_bare_plus": ("key 7Yh2+kQ9zXw4Lm0pR8sT1vB6nC3dF5gJ2aE9uI0o end",
                             "7Yh2+kQ9zXw4Lm0pR8sT1vB6nC3dF5gJ2aE9uI0o",
                             LOGS + "7Yh2+kQ9zXw4Lm0pR8sT1vB6nC3dF5gJ2aE9uI0o"),
    "authorization_token": ("curl -H 'Authorization: Token 9944b09199c62bcf9418ad846dd0e4bbdfc6ee4b' /api/v1/runs/",
                            "9944b09199c62bcf9418ad846dd0e4bbdfc6ee4b",
                            LOGS + "Authorization:Token 9944b09199c62bcf9418ad846dd0e4bbdfc6ee4b"),
    "json_password": ('{"user": "app", "password": "correct horse"}', "correct horse",
                      LOGS + '{"password":"hunter2x"}'),
    "json_token": ('{"token": "tok_9a8b7c6d", "n": 1}', "tok_9a8b7c6d", LOGS + '{"token":"tok_9a8b7c6d"}'),
    "uri_userinfo_https": ("cloned https://admin:Pa55w0rd@git.example.com/r.git", "Pa55w0rd",
                           "https://admin:Pa55w0rd@git.example.com/r.git"),
    "uri_userinfo_postgres": ("DATABASE_URL=postgres://app:s3cr3tpw@db:5432/app", "s3cr3tpw",
                              LOGS + "postgres://app:s3cr3tpw@db:5432/app"),
    "slack_webhook": ("posted to https://hooks.slack.com/services/T0A1B2C3D/B0A1B2C3D/abcdEFGHijklMNOPqrstUVWX",
                      "abcdEFGHijklMNOPqrstUVWX",
                      "https://hooks.slack.com/services/T0A1B2C3D/B0A1B2C3D/abcdEFGHijklMNOPqrstUVWX"),
    "google_api_key": ("maps key AIzaSyDaGmWKa4JsXZ-HjGw7ISLn_3namBGewQe", "AIzaSyDaGmWKa4JsXZ-HjGw7ISLn_3namBGewQe",
                       "https://maps.example.com/js?key=AIzaSyDaGmWKa4JsXZ-HjGw7ISLn_3namBGewQe"),
    "stripe_live": ("charged with sk_live_4eC39HqLyjWDarjtT1zdp7dc", "4eC39HqLyjWDarjtT1zdp7dc",
                    LOGS + "sk_live_4eC39HqLyjWDarjtT1zdp7dc"),
    "jwt": (f"session {JWT} expired", JWT, f"https://app.example.com/cb#id_token={JWT}"),
}


def test_the_table_holds_the_23_shapes():
    assert len(SECRETS) == 24  # 23 shapes, the bare AWS secret with a "/" and with a "+"


@pytest.mark.parametrize("name", SECRETS)
def test_redact_masks_each_shape_in_text(name):
    text, secret, _ = SECRETS[name]
    out = redact(text)
    assert secret not in out and "[redacted]" in out, out


@pytest.mark.parametrize("name", SECRETS)
def test_a_link_holding_a_secret_is_shown_and_linked_redacted(name):
    _, secret, link = SECRETS[name]
    view = evidence_view({"uri": link, "observed_at": "2026-01-01T00:00:00Z"})
    assert view["kind"] == "link", view
    for shown in (view["uri"], view["href"]):
        assert secret not in shown and "[redacted]" in shown and shown.startswith("https://"), shown


@pytest.mark.parametrize("text", [
    f"fixed in {GIT_SHA}", f"https://github.com/o/r/commit/{GIT_SHA}", f"sha1={GIT_SHA}",
    "3 tests failed; see https://ci/1", "https://github.com/Owner/Repository/blob/main/src/Module1/file.py",
    "max_tokens=500 tokens: 1200", '{"max_tokens": 500, "token_count": 3}', "sha256:" + "ab12" * 16,
    "digest sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=",
])
def test_ordinary_text_and_git_shas_stay_readable(text):
    assert redact(text) == text
    view = evidence_view({"uri": f"https://ci.example.com/log?q={text}"})
    assert view["uri"] == view["href"] == f"https://ci.example.com/log?q={text}"


def test_redact_keeps_ordinary_text_and_handles_none():
    assert redact("3 tests failed; see https://ci/1") == "3 tests failed; see https://ci/1"
    assert redact(None) == ""
    assert redact("password: 'a b c' next") == "password: [redacted] next"


def test_redact_data_walks_json_values():
    data = {"evidence": [{"excerpt": "AKIAIOSFODNN7EXAMPLE"}], "n": 3}
    assert redact_data(data) == {"evidence": [{"excerpt": "AKIA[redacted]"}], "n": 3}
    assert "hunter2" not in redact_json({"db": {"password": "hunter2", "token": "abc"}})


def test_redaction_stays_fast():
    """A pattern whose words the text lacks is skipped and every other is one linear pass: a quarter megabyte
    of ordinary log lines with a secret every few kilobytes, four times an event's data at its largest (64 KiB),
    is redacted well under a second."""
    lines = "".join(f"step {n}: 3 tests failed in 1.2s, see https://ci.example.com/runs/{n}/log\n"
                    for n in range(60))
    text = "".join(lines + SECRETS[name][0] + "\n" for name in list(SECRETS) * 4)[:256 * 1024]
    started = time.perf_counter()
    out = redact(text)
    assert time.perf_counter() - started < 1.0
    assert AWS_SECRET not in out and JWT not in out
