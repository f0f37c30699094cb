"""Smoke test of ``manage.py bench pages`` at a tiny scale: every page's figures print, and the
scratch database is dropped. Not a timing assertion."""

import re

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_bench_pages_prints_every_page(bench_command):
    """Run as a user would (a separate process, its own scratch database on this PostgreSQL server)."""
    stdout = bench_command("pages", "--scale", "0.001")
    summary = stdout.split("== summary", 1)[1]
    for page in ("runs list", "run detail, 500 events", "approvals inbox", "on-call", "compare", "reports"):
        line = next(line for line in summary.splitlines() if line.strip().startswith(page + ":"))
        p50, p95, statements = (float(x) for x in re.findall(r"([\d.]+)(?: ms)?", line.split("|")[1])[:3])
        assert 0 < p50 <= p95 and statements >= 1, line
    assert re.search(r"run detail p95, 2,000 events\s*\| [\d.]+ ms\s*\| 50 events [\d.]+ ms\s*\| [\d.]+x", summary)
