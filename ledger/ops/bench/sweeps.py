"""``python manage.py bench sweeps``: the sweeps at scale, in a scratch database (PostgreSQL only).

Loaded by COPY, then swept the way beat runs them (batches, one transaction each):

- stale claims: ``scale`` x 100,000 live claims past ``refresh_after``, owned by 100 owners —
  every claim marked and its owner notified once (a second sweep finds nothing);
- checkpoints: ``scale`` x 100,000 expired checkpoints, 100 per intent — all but the latest of
  each intent pruned;
- retention: ``scale`` x 2,000 sensitive claims past ``retention_until`` erased and tombstoned;
- leases: ``scale`` x 10,000 queued runs leased by 4 agent processes (``services.run_lease``) beside
  raw ``SELECT ... FOR UPDATE SKIP LOCKED`` + ``UPDATE`` by 4 psycopg connections (``bench.leases``).

For each: total time, rows per second, number of batches and the longest batch (the longest
any sweep holds its row locks). Figures only; nothing is asserted.
"""

from __future__ import annotations

import json
import time
import uuid
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import connection
from django.utils import timezone

from knowledge.ops import sweeps
from knowledge.services import store_versions_reserve
from ledger import services
from ledger.models import Checkpoint, Notification, Run, Workflow
from ledger.ops.bench import leases


def _copy(table: str, columns: str, rows) -> None:
    with connection.cursor() as cursor:
        raw = cursor.cursor if hasattr(cursor, "cursor") else cursor
        with raw.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)


def _owners(n: int, tag: str) -> list[int]:
    User = get_user_model()
    users = User.objects.bulk_create([User(username=f"bench-owner-{tag}-{i}", password="!") for i in range(n)])
    group, _ = Group.objects.get_or_create(name="owner")
    group.user_set.add(*users)
    return [u.id for u in users]


def _claims_load(n: int, *, tag: str, owners: list[int], sensitive: bool, now) -> None:
    """``n`` keys with one active version each, and their heads (stale, or past retention)."""
    first = store_versions_reserve(n) - n + 1
    observed = now - timedelta(days=2)
    refresh = now - timedelta(hours=1) if not sensitive else now + timedelta(days=10)
    retention = now - timedelta(minutes=1) if sensitive else None
    system = f"bench-{tag}"
    _copy("knowledge_claim",
          "key, version, store_version, status, statement, source_refs, source_type, scope_system, scope_version, "
          "scope_task, confidence, observed_at, refresh_after, owner_id, sensitivity, retention_until, derived_from, "
          "actor, reason, provenance, pending_reasons, policy_version, created_at",
          ((f"bench.{tag}/k{i:07d}", 1, first + i, "active", f"statement {i}",
            json.dumps([f"https://docs.example.com/{i}"]), "official-doc", system, "1", "bench", "reported",
            observed, refresh, owners[i % len(owners)], "sensitive" if sensitive else "internal", retention, "[]",
            "agent:bench", "", json.dumps({"action": "bench-load"}), "[]", "bench", observed) for i in range(n)))
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO knowledge_claimhead (key, current_id, latest_version, live, system, scope_version, task, "
            "sensitivity, owner_id, gc_status, refresh_due_at, updated_at) "
            "SELECT key, id, version, true, scope_system, scope_version, scope_task, sensitivity, owner_id, '', "
            "refresh_after, now() FROM knowledge_claim WHERE scope_system = %s", [system])
        cursor.execute("ANALYZE knowledge_claim")
        cursor.execute("ANALYZE knowledge_claimhead")


def _checkpoints_load(n: int, *, tag: str, per_intent: int, now) -> int:
    workflow = Workflow.objects.create(slug=f"bench-sweeps-{tag}", title="bench sweeps")
    intents = max(1, n // per_intent)
    runs = Run.objects.bulk_create([
        Run(workflow=workflow, intent=f"intent-{i}", trigger_key=f"bench-{i}", inputs={}, input_fingerprint="f" * 64,
            policy_version="1", state="completed", created_at=now, updated_at=now) for i in range(intents)])
    expired = now - timedelta(hours=1)
    _copy("ledger_checkpoint",
          "workflow_id, intent, run_id, source, payload, input_fingerprint, policy_version, env_fingerprint, "
          "created_at, expires_at",
          ((workflow.id, runs[i % intents].intent, runs[i % intents].id, "server", '{"stage": "build"}', "f" * 64,
            "1", "", expired, expired) for i in range(intents * per_intent)))
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE ledger_checkpoint")
    return intents


def _line(out, name, rows, seconds, batches, longest):
    out.write(f"  {name:34s} {rows:>9,} rows in {seconds:7.2f} s = {rows / seconds if seconds else 0:>9,.0f}/s; "
              f"{batches:>4} batches, longest batch (locks held) {longest * 1000:8.1f} ms\n")


def run(*, out, scale: float = 1.0) -> dict:
    """Load, sweep, print (see the module docstring); returns the figures."""
    settings.DEBUG = False
    settings.NOTIFICATIONS_EMAIL = False  # rows only: the bench measures the database work
    tag, now = uuid.uuid4().hex[:8], timezone.now()
    n_stale, n_checkpoints, n_retention = int(100_000 * scale), int(100_000 * scale), max(10, int(2_000 * scale))
    figures = {}
    out.write(f"sweeps bench: scale {scale:g}; {n_stale:,} stale claims, {n_checkpoints:,} checkpoints, "
              f"{n_retention:,} sensitive claims past retention\n")

    owners = _owners(100, tag)
    started = time.perf_counter()
    _claims_load(n_stale, tag=tag, owners=owners, sensitive=False, now=now)
    out.write(f"  loaded {n_stale:,} stale claims in {time.perf_counter() - started:.1f} s\n")
    started = time.perf_counter()
    report = sweeps.claims_stale_sweep(now=now)
    seconds = time.perf_counter() - started
    notified = Notification.objects.filter(kind="stale_claim").count()
    _line(out, "stale claims marked + notified", report["marked"], seconds, report["batches"],
          report["longest_batch_seconds"])
    again = time.perf_counter()
    repeat = sweeps.claims_stale_sweep(now=now)
    out.write(f"  notifications: {notified:,} (one per claim); a second sweep marked {repeat['marked']} in "
              f"{(time.perf_counter() - again) * 1000:.1f} ms\n")
    figures["stale"] = {**report, "seconds": seconds, "notifications": notified}

    started = time.perf_counter()
    intents = _checkpoints_load(n_checkpoints, tag=tag, per_intent=100, now=now)
    out.write(f"  loaded {Checkpoint.objects.count():,} expired checkpoints ({intents:,} intents) in "
              f"{time.perf_counter() - started:.1f} s\n")
    batch_times, removed = [], 0
    started = time.perf_counter()
    while True:
        t = time.perf_counter()
        n = services.checkpoints_prune(now=now, max_batches=1)
        if not n:
            break
        batch_times.append(time.perf_counter() - t)
        removed += n
    seconds = time.perf_counter() - started
    _line(out, "checkpoints pruned", removed, seconds, len(batch_times), max(batch_times, default=0.0))
    out.write(f"  checkpoints left: {Checkpoint.objects.count():,} (the latest of each intent)\n")
    figures["prune"] = {"removed": removed, "seconds": seconds, "batches": len(batch_times),
                        "longest_batch_seconds": max(batch_times, default=0.0)}

    _claims_load(n_retention, tag=f"{tag}r", owners=owners, sensitive=True, now=now)
    started = time.perf_counter()
    report = sweeps.claims_retention_sweep(now=now)
    seconds = time.perf_counter() - started
    _line(out, "sensitive claims erased + tombstoned", report["erased"], seconds, report["batches"],
          report["longest_batch_seconds"])
    figures["retention"] = {**report, "seconds": seconds}

    n_queued = max(20, int(10_000 * scale))
    service = leases.measure_service(n_queued, 4, tag=tag, now=timezone.now())
    raw = leases.measure_raw(n_queued, 4)
    share = service["rate"] / raw["rate"] if raw["rate"] else 0.0
    out.write(f"  {'queued runs leased, 4 agents':34s} {service['leases']:>9,} leases in {service['seconds']:7.2f} s = "
              f"{service['rate']:>9,.0f}/s ({service['distinct_leased']:,} runs leased, each once); raw SKIP LOCKED "
              f"+ UPDATE x4 {raw['leases']:,} in {raw['seconds']:.2f} s = {raw['rate']:,.0f}/s; ratio {share:.3f}x\n")
    figures["leases"] = {"service": service, "raw": raw, "ratio": share}
    return figures
