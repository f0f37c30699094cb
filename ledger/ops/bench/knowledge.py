"""``python manage.py bench knowledge``: the knowledge store's figures, with baselines from the same run.

- claims proposed per second through the write gate (each its own transaction), against raw
  psycopg INSERT + COMMIT of one row into a plain table;
- retrieval p50/p95 in a scope of 100,000 claims with ~10 versions per key (1,000,000 version
  rows, loaded in bulk with COPY by ``loader.claims_load``), against an indexed single-row SELECT by
  primary key; the query plans are printed to show that history is never scanned;
- reconcile of a 1,000-entry snapshot (a third live, a third tombstoned, a third new).

Everything is created under a fresh ``bench-<id>`` system and key prefix and removed at the
end (claim rows with the append-only guard explicitly ignored for those rows only). The store
counter is advanced by what was loaded; gaps in store_version are harmless. ``scale`` scales
every size (0.01 → 1,000 keys).
"""

import json
import random
import time
import uuid
from datetime import timedelta

import pgtrigger
from django.conf import settings
from django.db import connection
from django.db.models import Max, Min
from django.utils import timezone
from rest_framework.test import APIClient

from knowledge import selectors, services
from knowledge.api.claims import ClaimOutput
from knowledge.models import Claim, ClaimDerivation, ClaimHead, GateDecision
from ledger.identities import agent_create, operator_create
from ledger.ops.bench import loader
from ledger.ops.bench.common import median, percentile, plan_nodes, raw_insert_rate, raw_table

REPEATS = 5


def _ms(seconds):
    return f"{seconds * 1000:.3f} ms"


class _Bench:
    def __init__(self, out, scale):
        self.out = out
        self.scale = scale
        self.tag = uuid.uuid4().hex[:8]
        self.system = f"bench-{self.tag}"
        self.prefix = f"bench.{self.tag}/"
        self.baseline_table = f"bench_baseline_{self.tag}"
        self.users = []
        self.rng = random.Random(20250601)
        self.now = timezone.now()

    def line(self, text=""):
        self.out.write(text + "\n")

    # -- setup --------------------------------------------------------------------------------

    def make_identities(self):
        agent, self.agent_token = agent_create(name=f"bench-agent-{self.tag}")
        editor, _ = operator_create(name=f"bench-editor-{self.tag}", role="editor")
        self.agent, self.editor = agent.user, editor
        self.users = [self.agent, self.editor]

    def proposal(self, key, **overrides):
        now = timezone.now()
        data = {
            "key": key,
            "statement": f"Benchmark statement for {key}.",
            "source_refs": [f"https://docs.example.com/{key}"],
            "source_type": "official-doc",
            "scope": {"system": self.system, "version": "1", "task": "bench"},
            "confidence": "reported",
            "observed_at": (now - timedelta(hours=1)).isoformat(),
            "refresh_after": (now + timedelta(days=20)).isoformat(),
        }
        data.update(overrides)
        return data

    def bulk_load(self, n_keys):
        """n_keys keys, 1..19 versions each, and their heads (``loader.claims_load``)."""
        started = time.perf_counter()
        loaded = loader.claims_load(system=self.system, prefix=self.prefix, n_keys=n_keys, rng=self.rng,
                                    now=self.now)
        loader.claim_heads_build(system=self.system)
        loader.analyze(Claim, ClaimHead)
        self.live_keys, self.dead_keys = loaded.live_keys, loaded.dead_keys
        return loaded.versions, time.perf_counter() - started

    # -- measurements -------------------------------------------------------------------------

    def baseline_insert_rate(self, n):
        with raw_table(self.baseline_table) as table:
            return median([raw_insert_rate(n, table) for _ in range(REPEATS)])

    def propose_rate(self, n):
        rates = []
        for rep in range(REPEATS):
            datas = [self.proposal(f"{self.prefix}p{rep}-{i}",
                                   scope={"system": f"{self.system}-propose", "task": "bench"}) for i in range(n)]
            started = time.perf_counter()
            for data in datas:
                services.claim_propose(user=self.agent, data=data)
            rates.append(n / (time.perf_counter() - started))
        return median(rates)

    def timed(self, fn, samples):
        """Per-call latencies, REPEATS times; the median p50 and p95 across repetitions."""
        p50s, p95s = [], []
        for _ in range(REPEATS):
            latencies = []
            for _ in range(samples):
                started = time.perf_counter()
                fn()
                latencies.append(time.perf_counter() - started)
            p50s.append(percentile(latencies, 0.50))
            p95s.append(percentile(latencies, 0.95))
        return median(p50s), median(p95s)

    def retrieval(self, samples):
        keys = self.live_keys
        bounds = Claim.objects.filter(scope_system=self.system).aggregate(lo=Min("id"), hi=Max("id"))
        lo, hi = bounds["lo"], bounds["hi"]
        by_pk = (f"SELECT id, key, statement FROM {connection.ops.quote_name(Claim._meta.db_table)} "
                 "WHERE id = %s")

        def baseline():
            with connection.cursor() as cursor:
                cursor.execute(by_pk, [self.rng.randint(lo, hi)])
                cursor.fetchall()

        def serialize(heads):
            return ClaimOutput([h.current for h in heads], many=True, context={"now": None}).data

        def by_key():
            serialize(list(selectors.claims_live(user=self.agent, system=self.system, key=self.rng.choice(keys))))

        def page():
            serialize(list(selectors.claims_live(user=self.agent, system=self.system, task="bench",
                                                 after_key=self.rng.choice(keys))[:100]))

        host = next((h for h in settings.ALLOWED_HOSTS if h not in ("*",) and not h.startswith(".")), "localhost")
        client = APIClient(HTTP_HOST=host)
        client.credentials(HTTP_AUTHORIZATION=f"Token {self.agent_token}")

        def api_by_key():
            response = client.get("/api/v1/claims/", {"system": self.system, "key": self.rng.choice(keys)}, secure=True)
            assert response.status_code == 200, response.content

        def api_page():
            response = client.get("/api/v1/claims/", {"system": self.system, "task": "bench", "limit": 100,
                                                      "cursor": self.rng.choice(keys)}, secure=True)
            assert response.status_code == 200, response.content

        return {
            "baseline: SELECT one claim row by primary key": self.timed(baseline, samples),
            "claims_live(system, key) + serialize": self.timed(by_key, samples),
            "claims_live(system, task) page of 100 + serialize": self.timed(page, max(20, samples // 5)),
            "GET /api/v1/claims/?system=&key= (full request)": self.timed(api_by_key, max(20, samples // 2)),
            "GET /api/v1/claims/?system=&task=&limit=100 (full request)": self.timed(api_page, max(20, samples // 10)),
        }

    def plans(self):
        queries = {
            "by key": selectors.claims_live(user=self.agent, system=self.system, key=self.live_keys[0]),
            "page": selectors.claims_live(user=self.agent, system=self.system, task="bench",
                                          after_key=self.live_keys[len(self.live_keys) // 2])[:100],
        }
        result = {}
        for name, qs in queries.items():
            sql, params = qs.query.sql_with_params()
            with connection.cursor() as cursor:
                cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
                plan = cursor.fetchone()[0]
            plan = plan if isinstance(plan, list) else json.loads(plan)
            result[name] = [(node["Node Type"], node.get("Relation Name"), node.get("Index Name"))
                            for node in plan_nodes(plan[0]["Plan"])]
        return result

    def reconcile(self, n):
        third = max(1, n // 3)
        timings, counts = [], None
        for rep in range(REPEATS):
            live = self.rng.sample(self.live_keys, min(third, len(self.live_keys)))
            dead = self.rng.sample(self.dead_keys, min(third, len(self.dead_keys)))
            new = [f"{self.prefix}r{rep}-{i}" for i in range(n - len(live) - len(dead))]
            entries = [{**self.proposal(k, statement="remembered"), "store_version": 1} for k in live + dead + new]
            self.rng.shuffle(entries)
            started = time.perf_counter()
            answer = services.knowledge_reconcile(user=self.agent, entries=entries, checkpoint=f"bench-{rep}")
            timings.append(time.perf_counter() - started)
            counts = answer["counts"]
        return median(timings), counts

    # -- cleanup ------------------------------------------------------------------------------

    def cleanup(self):
        loader.rows_delete(ClaimHead.objects.filter(key__startswith=self.prefix))
        with pgtrigger.ignore("knowledge.Claim:append_only", "knowledge.ClaimDerivation:append_only",
                              "knowledge.GateDecision:append_only"):
            loader.rows_delete(ClaimDerivation.objects.filter(claim__key__startswith=self.prefix))
            loader.rows_delete(Claim.objects.filter(key__startswith=self.prefix))
            loader.rows_delete(GateDecision.objects.filter(key__startswith=self.prefix))
        for user in self.users:
            user.delete()


def run(*, out, scale: float = 1.0) -> None:
    """Print the knowledge benchmark figures (see the module docstring)."""
    bench = _Bench(out, scale)
    n_keys = max(100, int(100_000 * scale))
    n_propose = max(50, int(500 * scale))
    n_reconcile = max(30, int(1000 * scale))
    samples = max(50, int(500 * min(scale, 1.0)))
    line = bench.line
    line(f"knowledge bench (scale {scale}, {REPEATS} repetitions each, medians; "
         f"PostgreSQL {connection.pg_version if hasattr(connection, 'pg_version') else ''})")
    try:
        bench.make_identities()

        baseline = bench.baseline_insert_rate(n_propose)
        rate = bench.propose_rate(n_propose)
        line("")
        line(f"write gate: {n_propose} proposals per repetition, one transaction each")
        line(f"  baseline raw psycopg INSERT+COMMIT      {baseline:10.0f} rows/s")
        line(f"  claim_propose through the gate          {rate:10.0f} claims/s   "
             f"({rate / baseline:.2f}x of baseline, {1000 / rate:.2f} ms per claim)")

        total, load_s = bench.bulk_load(n_keys)
        line("")
        line(f"retrieval: scope with {n_keys:,} keys, {total:,} version rows ({total / n_keys:.1f} per key), "
             f"COPY-loaded in {load_s:.1f} s; {len(bench.live_keys):,} live keys")
        figures = bench.retrieval(samples)
        base_p50, base_p95 = figures["baseline: SELECT one claim row by primary key"]
        for name, (p50, p95) in figures.items():
            ratio = "" if name.startswith("baseline") else f"   p50 {p50 / base_p50:.1f}x baseline"
            line(f"  {name:58s} p50 {_ms(p50):>10s}  p95 {_ms(p95):>10s}{ratio}")
        plans = bench.plans()
        for name, nodes in plans.items():
            described = ", ".join(f"{t}{' on ' + r if r else ''}{' using ' + i if i else ''}" for t, r, i in nodes)
            history_scan = any(t == "Seq Scan" and r == "knowledge_claim" for t, r, _ in nodes) or any(
                r == "knowledge_claim" and i not in (None, "knowledge_claim_pkey") for t, r, i in nodes)
            line(f"  plan ({name}): {described}")
            line(f"    history scanned: {'YES' if history_scan else 'no'}")

        seconds, counts = bench.reconcile(n_reconcile)
        line("")
        line(f"reconcile: {n_reconcile} entries per snapshot ({counts})")
        line(f"  knowledge_reconcile                      {_ms(seconds):>10s} per snapshot, "
             f"{seconds / n_reconcile * 1e6:.0f} µs per entry, {n_reconcile / seconds:.0f} entries/s "
             f"({(n_reconcile / seconds) / baseline:.2f}x of the INSERT+COMMIT baseline)")
    finally:
        bench.cleanup()
        line("")
        line("cleaned up bench data")
