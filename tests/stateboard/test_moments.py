"""stateboard.moments: the one parser for moments from outside."""

import pytest

from stateboard.moments import parse_moment

pytestmark = pytest.mark.django_db


def test_parse_moment_normalises_to_utc_and_refuses_out_of_range():
    """One parser for outside moments: UTC out, None for an offset that overflows, naive only on request."""
    assert parse_moment("2026-01-01T00:00:00+20:58").isoformat() == "2025-12-31T03:02:00+00:00"
    assert parse_moment("9999-12-31T23:59:59-20:58") is None and parse_moment("0001-01-01T00:00:00+20:58") is None
    assert parse_moment("2026-02-30T00:00:00Z") is None and parse_moment("2026-01-01T00:00") is None
    assert parse_moment("2026-01-01T00:00", naive_as_utc=True).isoformat() == "2026-01-01T00:00:00+00:00"
