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
    for page in ("/runs/ attribute filter, 1 % (team)", "API attribute filter, 1 % (int shard)",
                 "API attribute filters, 0.01 % (AND)"):  # SPEC §15's figure and its statements
        line = next(line for line in summary.splitlines() if line.strip().startswith(page + ":"))
        p95, statements = re.findall(r"([\d.]+) ms, (\d+)", line)[0]
        assert float(p95) > 0 and int(statements) >= 1, line
    assert "attribute filters' plans: the GIN index, no scan" in summary
    line = next(line for line in summary.splitlines() if line.strip().startswith("alert evaluation, 100 rules"))
    seconds, statements = re.findall(r"([\d.]+) s, (\d+)", line)[0]
    assert float(seconds) > 0 and int(statements) > 100, line  # every rule read (SPEC §14's figure)
