"""The recovery decision's latency: its read path (what a trigger reads to decide, no lock, no
write) and, for reference, a full ``run_trigger`` rolled back, over intents of a loaded
``LedgerHistory``; plus the EXPLAIN of every query of the read path."""

from __future__ import annotations

import json
import random
import re
import time
from collections import Counter

from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from ledger import services
from ledger.domain import recovery
from ledger.models import Workflow
from ledger.ops.bench.common import Out, median, percentile, plan_nodes
from ledger.ops.bench.loader import ENV, IntentInfo, LedgerHistory


def decision_read_path(workflow_slug: str, intent: str, inputs: dict, env: str = ENV):
    """What a trigger reads to decide (no lock, no write): workflow, holding runs, L2/L3, decision."""
    workflow = Workflow.objects.get(slug=workflow_slug)
    fp = services.input_fingerprint(workflow_slug=workflow.slug, intent=intent, inputs=inputs,
                                    policy_version=workflow.policy_version)
    others = services.holding_runs(workflow=workflow, intent=intent)
    inp, _ = services.recovery_input_gather(workflow=workflow, intent=intent, fingerprint=fp,
                                            policy_version=workflow.policy_version, env_fingerprint=env,
                                            others=others, now=timezone.now())
    return recovery.recovery_decide(inp)


def decision_full_trigger(workflow_slug: str, intent: str, inputs: dict, env: str = ENV):
    """A full ``run_trigger`` (locks, decision, the new run and its events), rolled back."""
    with transaction.atomic():
        run, _ = services.run_trigger(workflow_slug=workflow_slug, inputs=inputs, intent=intent,
                                      env_fingerprint=env, actor="agent:bench")
        transaction.set_rollback(True)
    return run.decision


def _samples(loader: LedgerHistory, pool: list[IntentInfo], n: int, rng: random.Random) -> list[tuple]:
    """(workflow, intent, inputs): mostly the latest inputs (same fingerprint), 1 in 5 a new version."""
    chosen = [rng.choice(pool) for _ in range(n)]
    out = []
    for info in chosen:
        inputs = dict(info.inputs)
        if rng.random() < 0.2:
            inputs["version"] = inputs["version"] + 1
        out.append((info.workflow_slug, info.intent, inputs))
    return out


def measure_decisions(loader: LedgerHistory, reps: int, per_rep: int, seed: int) -> dict:
    rng = random.Random(seed)
    pool = loader.intents
    for args in _samples(loader, pool, min(20, per_rep), rng):  # warm-up: code paths and connection
        decision_read_path(*args)
        decision_full_trigger(*args)
    read_p50, read_p95, full_p50, full_p95, outcomes = [], [], [], [], Counter()
    for _ in range(reps):
        read, full = [], []
        for args in _samples(loader, pool, per_rep, rng):
            t0 = time.perf_counter()
            decision = decision_read_path(*args)
            t1 = time.perf_counter()
            decision_full_trigger(*args)
            t2 = time.perf_counter()
            read.append((t1 - t0) * 1000)
            full.append((t2 - t1) * 1000)
            outcomes[f"{decision.outcome}/{decision.reason_code}"] += 1
        read_p50.append(percentile(read, 0.50))
        read_p95.append(percentile(read, 0.95))
        full_p50.append(percentile(full, 0.50))
        full_p95.append(percentile(full, 0.95))
    return {"read_p50": median(read_p50), "read_p95": median(read_p95), "full_p50": median(full_p50),
            "full_p95": median(full_p95), "outcomes": outcomes}


def explain_decision(loader: LedgerHistory, say: Out) -> list[str]:
    """EXPLAIN ANALYZE every query of one read path (an intent whose work is complete, with effects)."""
    info = next((i for i in reversed(loader.intents) if i.complete_with_effects), loader.intents[-1])
    with CaptureQueriesContext(connection) as captured:
        decision = decision_read_path(info.workflow_slug, info.intent, info.inputs)
    say(f"EXPLAIN of the decision's read path at {loader.totals['events']:,} events "
        f"(intent {info.intent!r} -> {decision.outcome}/{decision.reason_code}, {len(captured)} round trips):")
    seq_scans = []
    with transaction.atomic(), connection.cursor() as cur:
        statements = [query["sql"] for query in captured.captured_queries]
        for n, sql in enumerate(statements, 1):
            cur.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql)
            raw = cur.fetchone()[0]
            doc = json.loads(raw) if isinstance(raw, str) else raw
            top = doc[0]
            nodes = list(plan_nodes(top["Plan"]))
            scans = []
            for node in nodes:
                if "Relation Name" in node or "Index Name" in node:
                    what = node["Node Type"]
                    if node.get("Index Name"):
                        what += f" {node['Index Name']}"
                    else:
                        what += f" on {node['Relation Name']}"
                        if node["Node Type"] == "Seq Scan":
                            seq_scans.append(node["Relation Name"])
                    scans.append(what)
            table = re.search(r'FROM "(\w+)"', sql)
            where = re.search(r"WHERE (.*?)( ORDER BY| LIMIT| GROUP BY|$)", sql)
            cols = sorted(set(re.findall(r'"\w+"\."(\w+)"', where.group(1)))) if where else []
            say(f"  {n}. {table.group(1) if table else '?'} by {','.join(cols) or '-'}: "
                f"{'; '.join(scans) or top['Plan']['Node Type']} "
                f"({top.get('Execution Time', 0):.3f} ms)")
        transaction.set_rollback(True)
    if seq_scans:
        say(f"  WARNING: sequential scans on {', '.join(sorted(set(seq_scans)))}")
    return seq_scans


