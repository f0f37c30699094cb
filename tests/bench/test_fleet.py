"""Smoke tests of ``manage.py bench longpoll`` and ``bench fleet`` at a tiny size: the figures print,
each from real HTTP against granian, and the scratch database is dropped."""

import re

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("clients", [[], ["--threads"]], ids=["asyncio", "threads"])
def test_bench_longpoll_prints_the_ratios_beside_waiting_leases(bench_command, clients):
    stdout = bench_command("longpoll", "--waiters", "10", "--calls", "20", "--wait", "4", *clients, timeout=200)
    assert ("each on a thread" in stdout) == bool(clients), stdout
    for name in ("/healthz", "append"):
        row = re.search(rf"{name} p95 beside 10 waiting leases\s*\| ([\d.]+) ms\s*\| ([\d.]+) ms alone\s*\| ([\d.]+)x",
                        stdout)
        assert row and all(float(x) > 0 for x in row.groups()), stdout
    assert re.search(r"newly queued run leased after\s*\| [\d.]+ s", stdout), stdout


def test_bench_fleet_steps_agents_without_then_with_the_trace_export_and_prints_the_capacity(bench_command):
    """On a private cluster (``--private-cluster``), which also prints PostgreSQL's figures per statement."""
    stdout = bench_command("fleet", "--steps", "4,8", "--step-seconds", "4", "--tracing", "both", "--private-cluster",
                           timeout=200)
    assert re.search(r"private cluster: PostgreSQL [\d.]+ .* on 127\.0\.0\.1:\d+ with pg_stat_statements", stdout), stdout
    statements = re.findall(r"PostgreSQL \(pg_stat_statements\): (\d+) statements, ([\d.]+) a request; executing and "
                            r"planning ([\d.]+) ms a request", stdout)
    assert len(statements) == 4 and all(int(n) > 0 and float(ms) > 0 for n, _, ms in statements), stdout
    assert re.search(r"^\s+\d+%\s+\d+ .*(UPDATE|INSERT INTO) \"ledger_run\"", stdout, re.M), stdout  # an append's write
    assert "what the bench's busy backends were doing" in stdout, stdout
    steps = re.findall(r"N=\s*(\d+), tracing (on|off): appends\s+(\d+) p95\s+([\d.]+) ms.*errors (\d+)", stdout)
    assert [(n, mode) for n, mode, *_ in steps] == [("4", "off"), ("4", "on"), ("8", "off"), ("8", "on")], stdout
    assert all(int(appends) > 0 and float(p95) > 0 and errors == "0" for *_, appends, p95, errors in steps), stdout
    per_request = re.findall(r"per request: web CPU ([\d.]+) ms, database CPU ([\d.]+) ms", stdout)
    assert len(per_request) == 4 and all(float(web) > 0 for web, _ in per_request), stdout
    export = re.search(r"trace export: (\d+) spans in (\d+) requests to the collector, the exporter ([\d.]+) cores", stdout)
    assert export and float(export.group(3)) > 0, stdout  # the exporter's passes ran (its process spent CPU)
    for mode in ("off", "on"):
        assert re.search(rf"fleet capacity with tracing {mode} \(append p95 ≤ 50 ms.*\)\s*\| \d+ agents", stdout), stdout
