"""Leasing queued runs at scale (part of ``bench sweeps``): ``n`` queued runs COPYed in, leased by
``clients`` agent processes calling ``services.run_lease`` until none is left, beside the raw
``SELECT ... FOR UPDATE SKIP LOCKED`` + ``UPDATE`` on a plain scratch table by as many psycopg
connections, measured in the same run. Figures only."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

from ledger import services
from ledger.identities import agent_create
from ledger.models import Run, Workflow
from ledger.ops.bench.common import raw_connect, run_clients
from ledger.ops.bench.loader import RUN_FIELDS, analyze, copy_rows

RAW_QUEUE = "bench_raw_queue"


def _queued_runs_load(n: int, *, tag: str, now) -> str:
    """``n`` fresh runs of a new workflow, queued for any agent (oldest first by ``queued_at``)."""
    workflow = Workflow.objects.create(slug=f"bench-lease-{tag}", title="bench leases", stages=["work"],
                                       effect_stages=[], approval_stages=[], lease_seconds=3600)
    decision = json.dumps({"outcome": "fresh", "reason_code": "no_checkpoint", "retry_count": 0, "max_retries": 3})
    rows = ((uuid.uuid4(), workflow.id, f"lease/{i:07d}", "api", f"lease-{i}", "{}", "f" * 64, "1", "img:1",
             "fresh", decision, "", "{}", "bench", now, now, None, now, None, "", None, 0, "0" * 64,
             now + timedelta(microseconds=i), now + timedelta(hours=1)) for i in range(n))
    copy_rows(Run, RUN_FIELDS + ("queued_at", "queued_until"), rows)
    analyze(Run)
    return workflow.slug


def measure_service(n: int, clients: int, *, tag: str, now) -> dict:
    slug = _queued_runs_load(n, tag=tag, now=now)

    agents = [agent_create(name=f"bench-lease-{tag}-{i}")[0].user for i in range(clients)]

    def step(agent):
        return services.run_lease(user=agent, workflows=[slug]) is not None

    m = run_clients(clients, lambda i: agents[i], step, 3600)
    leased = Run.objects.filter(workflow__slug=slug, queued_until__isnull=True).exclude(lease_owner="")
    return {"leases": m.ops, "seconds": m.seconds, "rate": m.rate, "distinct_leased": leased.count()}


def measure_raw(n: int, clients: int) -> dict:
    with raw_connect(autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {RAW_QUEUE}")
        conn.execute(f"CREATE TABLE {RAW_QUEUE} (id bigserial PRIMARY KEY, queued_at timestamptz NOT NULL, "
                     "lease_owner text NOT NULL DEFAULT '', leased_at timestamptz)")
        conn.execute(f"INSERT INTO {RAW_QUEUE} (queued_at) SELECT now() + g * interval '1 microsecond' "
                     "FROM generate_series(1, %s) g", [n])
        conn.execute(f"CREATE INDEX ON {RAW_QUEUE} (queued_at) WHERE lease_owner = ''")
        conn.execute(f"ANALYZE {RAW_QUEUE}")
    try:
        def prepare(i):
            return {"conn": raw_connect(), "owner": f"raw-{i}"}

        def step(ctx):
            conn = ctx["conn"]
            row = conn.execute(f"SELECT id FROM {RAW_QUEUE} WHERE lease_owner = '' ORDER BY queued_at, id "
                               "LIMIT 1 FOR UPDATE SKIP LOCKED").fetchone()
            if row is None:
                conn.rollback()
                return False
            conn.execute(f"UPDATE {RAW_QUEUE} SET lease_owner = %s, leased_at = now() WHERE id = %s",
                         [ctx["owner"], row[0]])
            conn.commit()
            return True

        m = run_clients(clients, prepare, step, 3600, lambda ctx: ctx["conn"].close())
    finally:
        with raw_connect(autocommit=True) as conn:
            conn.execute(f"DROP TABLE IF EXISTS {RAW_QUEUE}")
    return {"leases": m.ops, "seconds": m.seconds, "rate": m.rate}
