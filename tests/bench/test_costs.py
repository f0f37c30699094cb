"""``manage.py bench costs``: a row per request kind with the web process's CPU, the database backend's CPU
and the statements of one request, each measured (positive); the plain append is the cheapest write and
sends the fewest statements of the writes, as the store's one-statement append makes it."""

import re

import pytest

from ledger.ops.bench.costs import KINDS

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_bench_costs_prints_each_kind_with_its_cpu_and_statements(bench_command):
    stdout = bench_command("costs", "--ops", "3", timeout=300)
    rows = {}
    for kind, label in KINDS:
        match = re.search(re.escape(label) + r"\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)", stdout)
        assert match, stdout
        rows[kind] = [float(x) for x in match.groups()]
        assert rows[kind][0] > 0 and rows[kind][2] >= 1, (kind, rows[kind])
    assert rows["plain"][2] == 3  # the token, the run as read, the one-statement write
    assert rows["plain"][2] < rows["checkpoint"][2] and rows["plain"][2] < rows["trigger"][2]
