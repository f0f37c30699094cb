"""The attribute filter (SPEC §15) at scale, for ``bench pages``.

``labelled_runs_load`` COPYs bare runs (a row each, no events: the filter reads only the run table) labelled
``{team: "team-NNN", shard: N, hot: bool}``, so that one ``team`` and one ``shard`` value each match 1 % of
them (``shard`` is an integer: ``attr.shard=7`` is the OR of two containments, the integer and the string).
``figures`` times the first page of ``/runs/`` and of ``GET /api/v1/runs/`` with those filters and prints
PostgreSQL's plan of the page's read (the GIN index ``run_attributes_gin``, migration 0025, not a scan).
"""

from __future__ import annotations

import json
import random
import time
import uuid
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from ledger.filters import RunFilter
from ledger.models import Run, RunKey, Workflow
from ledger.ops.bench.loader import ENV, RUN_FIELDS, analyze, copy_rows
from ledger.selectors import run_list

WORKFLOW = "bench-attributes"
VALUES = 100  # each team and each shard: 1 % of the labelled runs
BATCH = 50_000
TARGET_P95_MS = 300.0
INDEXED_FROM = 100_000  # runs in the table from which the plan must read the index (a small table is scanned)
FILTERS = (("attribute filter, 1 % (team)", "attr.team=team-007"),
           ("attribute filter, 1 % (int shard)", "attr.shard=7"),
           ("attribute filters, 0.01 % (AND)", "attr.team=team-007&attr.shard=7"))


def labelled_runs_load(n: int, say) -> int:
    """COPY ``n`` completed runs of one workflow, each with its attributes, created over 90 days; returns n."""
    if n <= 0:
        return 0
    workflow, _ = Workflow.objects.get_or_create(slug=WORKFLOW, defaults={
        "title": "Bench attributes", "stages": ["work"], "effect_stages": [], "approval_stages": []})
    rng, now, started, done = random.Random(15), timezone.now(), time.perf_counter(), 0
    while done < n:
        size = min(BATCH, n - done)

        def rows(first=done, size=size):
            for i in range(first, first + size):
                at = now - timedelta(seconds=rng.uniform(600, 90 * 86400))
                attributes = {"team": f"team-{i % VALUES:03d}", "shard": (i // VALUES) % VALUES, "hot": i % 2 == 0}
                yield (uuid.uuid4(), workflow.id, f"labelled/{i:07d}", "api", f"api:{uuid.uuid4()}", "{}",
                       f"{i:064x}", "1", ENV, "completed", '{"outcome": "fresh"}', "", "{}", "bench", at, at, at,
                       at, None, "", None, 0, "", json.dumps(attributes))

        with transaction.atomic():
            copy_rows(Run, (*RUN_FIELDS, "attributes"), rows())
        done += size
        say(f"  [attributes] {done:,} / {n:,} labelled runs ({time.perf_counter() - started:.1f} s)")
    analyze(Run, RunKey)
    return n


def plan(query: str) -> list[str]:
    """PostgreSQL's plan of the runs page's first-page read for ``query`` (``attr.…``)."""
    params = dict(pair.split("=", 1) for pair in query.split("&"))
    runs = RunFilter(params, queryset=run_list()).qs[:50]
    return runs.explain().splitlines()


def uses_the_index(lines: list[str]) -> bool:
    """The plan reads the attributes' GIN index (each partition's is named ``…_attributes_idx``), and scans no
    run table whole."""
    text = "\n".join(lines)
    return "Bitmap Index Scan on ledger_run" in text and "_attributes_idx" in text and "Seq Scan on ledger_run" not in text


def scans_no_run_table(lines: list[str]) -> bool:
    """A common filter (1 %) may read the runs newest first through ``run_created_desc`` and stop at the page's
    50th match; never a sequential scan."""
    return "Seq Scan on ledger_run" not in "\n".join(lines)
