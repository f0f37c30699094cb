"""``manage.py bench instructions``: callgrind's counts of the five loops are printed, each positive, and an
append costs the client process more than a raw INSERT + COMMIT, more through HTTP than through the
service layer alone, a batch of events more than one event, a new trigger more than an append. Skipped
where valgrind is not installed."""

import re
import shutil

import pytest

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not shutil.which("valgrind") or not shutil.which("callgrind_control"),
                       reason="needs valgrind"),
]


def test_bench_instructions_counts_each_loop(bench_command):
    text = bench_command("instructions", "--ops", "5", timeout=900)
    counts = {}
    for label in ("raw psycopg INSERT + COMMIT", "append, service layer, plain", "append, HTTP stack in-process, plain",
                  "append batch of 20, service layer", "new trigger, service layer"):
        match = re.search(re.escape(label) + r"\s+([\d,]+)\s+raw / this ([\d.]+)x", text)
        assert match, text
        counts[label] = int(match.group(1).replace(",", ""))
        assert float(match.group(2)) > 0
    raw, service, http, batch, trigger = counts.values()
    assert 0 < raw < service < http
    assert service < batch and service < trigger
