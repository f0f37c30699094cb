"""stateboard.redact: each secret pattern is masked; ordinary text is left alone."""

import pytest

from stateboard.redact import redact, redact_data

PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7\nabc\n-----END RSA PRIVATE KEY-----"
SECRETS = {
    "aws": ("key AKIAIOSFODNN7EXAMPLE in env", "AKIAIOSFODNN7EXAMPLE"),
    "pem": (f"dump {PEM} end", "MIIEowIBAAKCAQEA7"),
    "bearer": ("curl -H 'Authorization: Bearer eyJhbGciOi.J9x-y_z' /api", "eyJhbGciOi.J9x-y_z"),
    "password": ("db url?user=app&password=hunter2&x=1", "hunter2"),
}


@pytest.mark.parametrize("name", SECRETS)
def test_redact_masks_each_pattern(name):
    text, secret = SECRETS[name]
    out = redact(text)
    assert secret not in out and "[redacted]" in out


def test_redact_keeps_ordinary_text_and_handles_none():
    assert redact("3 tests failed; see https://ci/1") == "3 tests failed; see https://ci/1"
    assert redact(None) == ""
    assert redact("password: 'a b c' next") == "password: [redacted] next"


def test_redact_data_walks_json_values():
    data = {"evidence": [{"excerpt": "AKIAIOSFODNN7EXAMPLE"}], "n": 3}
    assert redact_data(data) == {"evidence": [{"excerpt": "AKIA[redacted]"}], "n": 3}
