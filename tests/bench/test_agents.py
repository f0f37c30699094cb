"""Smoke test of ``manage.py bench agents`` at a tiny scale: the client's runs/s beside the raw
HTTP append and the resume packet latencies print, and the scratch database is dropped."""

import re

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_bench_agents_prints_client_runs_and_packet_latency(bench_command):
    """Run as a user would (a separate process with gunicorn, its own scratch database)."""
    stdout = bench_command("agents", "--scale", "0.0001", "--reps", "1", "--duration", "0.1", "--clients", "2")
    summary = stdout.split("== summary", 1)[1]
    full = re.search(r"full run, Python client over HTTP, 2 clients\s*\| ([\d.,]+) runs/s\s*\| raw append x2 "
                     r"([\d,]+)/s = [\d.,]+ runs/s\s*\| ([\d.]+)x", summary)
    assert full and all(float(x.replace(",", "")) > 0 for x in full.groups()), summary
    for where in ("in-process", "GET over HTTP"):
        line = next(line for line in summary.splitlines() if f"resume packet {where}" in line)
        p50, p95 = (float(x) for x in re.findall(r"[\d.]+", line.split("|")[1])[:2])
        assert 0 < p50 <= p95, line
