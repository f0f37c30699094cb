"""A bulk loader for scale tests: realistic ledger histories and claim histories, COPYed straight
into the models' tables.

``copy_rows(Model, fields, rows)`` is the one way in: ``fields`` are model field names (a foreign
key by its field name, e.g. ``run``), mapped to columns through the model's ``_meta``; the rows go
over Django's own connection in the current transaction with PostgreSQL ``COPY``. Values are what
COPY takes: JSON already serialized to text, foreign keys as ids, aware datetimes; a field left out
gets its database default (the bigserial primary keys). Nothing here goes through the services:
these are generated histories, not replayed ones, so the hash chain is synthetic (SHA-256 over the
run, seq, kind and previous hash) and the append-only guards never fire (COPY only inserts).

- ``LedgerHistory``: runs with their events, server checkpoints and effects, intent by intent;
- ``claims_load`` + ``claim_heads_build``: keys with 1-19 versions each and their heads.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta

from django.db import connection, transaction
from django.utils import timezone

from knowledge.models import Claim, ClaimHead
from knowledge.services import store_versions_reserve
from ledger.models import Checkpoint, Effect, EffectKey, LedgerEvent, Run, RunKey, Workflow
from ledger.services import effect_key_default, input_fingerprint


def copy_rows(model, fields: tuple[str, ...], rows) -> int:
    """COPY ``rows`` (tuples in the order of ``fields``, model field names) into ``model``'s table;
    returns how many rows were written."""
    quote = connection.ops.quote_name
    columns = ", ".join(quote(model._meta.get_field(name).column) for name in fields)
    written = 0
    connection.ensure_connection()
    with connection.connection.cursor() as cursor:
        with cursor.copy(f"COPY {quote(model._meta.db_table)} ({columns}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
                written += 1
    return written


def analyze(*models) -> None:
    """Refresh the planner's statistics of the models' tables after a load."""
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE " + ", ".join(connection.ops.quote_name(m._meta.db_table) for m in models))


# ---------------------------------------------------------------------------------------------
# ledger histories


LOAD_SHAPES = (
    # (stages, effect stages)
    (("discovery", "assessment", "draft", "build", "commit", "push", "deploy", "verify"), ("commit", "push", "deploy")),
    (("collect", "analyze", "draft", "publish", "verify"), ("publish",)),
    (("fetch", "triage", "label", "notify"), ()),
)
LOAD_WORKFLOWS = 20

# Model field names, in the order of the generated tuples.
RUN_FIELDS = ("id", "workflow", "intent", "trigger", "trigger_key", "inputs", "input_fingerprint",
              "policy_version", "env_fingerprint", "state", "decision", "current_stage", "stage_states",
              "triggered_by", "created_at", "updated_at", "ended_at", "decided_at", "retried_at",
              "lease_owner", "lease_expires_at", "event_count", "last_hash")
EVENT_FIELDS = ("run", "intent", "seq", "at", "stage", "kind", "actor", "input_fingerprint", "policy_version",
                "env_fingerprint", "idempotency_key", "effect", "evidence", "reason_code", "data",
                "client_event_id", "body_digest", "prev_hash", "hash")
CHECKPOINT_FIELDS = ("workflow", "intent", "run", "source", "payload", "input_fingerprint",
                     "policy_version", "env_fingerprint", "version_boundary", "created_at", "expires_at")
EFFECT_FIELDS = ("idempotency_key", "workflow", "intent", "input_fingerprint", "stage", "run", "status",
                 "system", "operation", "reference", "attempts", "claimed_seq", "last_seq", "created_at",
                 "updated_at")
ENV = "img:2024.06"


@dataclass
class IntentInfo:
    workflow_slug: str
    intent: str
    inputs: dict
    complete_with_effects: bool = False


class LedgerHistory:
    """Generates realistic run histories and COPYs them into the ledger tables (``load``).

    Per intent 1-7 runs (mean 4) over ~90 days; the source version changes between runs with
    probability 0.35 (a new input fingerprint); a run whose fingerprint is complete is a ``noop``;
    otherwise it verifies pending ``unknown`` effects, then passes the remaining stages
    (``started``/``succeeded``, plus ``verified`` on effect stages) or fails at one (on an effect
    stage half the failures are ``unknown``: outcome not observed). Server-style checkpoints after
    the last passed stage (and one midway), effects with their default keys. The hash chain is
    synthetic (SHA-256 over the run, seq, kind and previous hash), not the service's.
    """

    def __init__(self, say, seed: int = 20240601):
        """``say`` prints a progress line. Creates (or reuses) the 20 workflows the intents use;
        ``intents`` lists what was loaded, ``totals`` counts the rows."""
        self.say, self.rng, self.now = say, random.Random(seed), timezone.now()
        self.workflows = []
        for i in range(LOAD_WORKFLOWS):
            stages, effects = LOAD_SHAPES[i % len(LOAD_SHAPES)]
            wf, _ = Workflow.objects.get_or_create(
                slug=f"load-wf-{i:02d}",
                defaults={"title": f"Load {i}", "stages": list(stages), "effect_stages": list(effects),
                          "approval_stages": [], "policy_version": "3"})
            self.workflows.append(wf)
        self.next_intent = 0
        self.intents: list[IntentInfo] = []
        self.totals = {"runs": 0, "events": 0, "checkpoints": 0, "effects": 0}

    # -- generation

    def _intent_rows(self, rows):
        rng = self.rng
        idx = self.next_intent
        self.next_intent += 1
        wf = self.workflows[idx % len(self.workflows)]
        stages, effect_stages = list(wf.stages), set(wf.effect_stages)
        intent = f"{wf.slug}/item-{idx:07d}"
        version = 1
        t = self.now - timedelta(days=90) + timedelta(seconds=rng.uniform(0, 60 * 86400))
        fps: dict[str, dict] = {}
        n_runs = rng.randint(1, 7)
        inputs = {}
        complete_with_effects = False
        for k in range(n_runs):
            if k and rng.random() < 0.35:
                version += 1
            inputs = {"source": intent, "version": version, "window": "2024-06"}
            fp = input_fingerprint(workflow_slug=wf.slug, intent=intent, inputs=inputs,
                                   policy_version=wf.policy_version)
            st = fps.setdefault(fp, {"done": {}, "effects": {}, "complete": False})
            t = min(t + timedelta(seconds=rng.uniform(1800, 3 * 86400)), self.now - timedelta(minutes=5))
            run_id = uuid.uuid4()
            events = []  # (stage, kind, reason, data_json, effect_json, evidence_json, idem, agent)

            def system(kind, reason="", data="{}", stage=""):
                events.append((stage, kind, reason, data, None, "[]", "", False))

            system("transition", "", '{"from": "captured", "to": "restore"}')
            checkpoints = []
            if st["complete"]:
                outcome, reason, state = "noop", "verified_effect_same_fingerprint", "noop"
            else:
                outcome, reason, state = "fresh", "no_checkpoint" if not st["done"] else "resume_incomplete_stage", ""
            decision = {"outcome": outcome, "reason_code": reason, "retry_count": 0, "max_retries": 3}
            system("decided", reason, json.dumps(decision))
            system("transition", reason, json.dumps({"from": "compare", "to": outcome}))
            fail_at = None
            if not st["complete"]:
                remaining = [s for s in stages if s not in st["done"]]
                if rng.random() < 0.4:
                    fail_at = rng.randrange(len(remaining))
                passed = 0
                for j, stage in enumerate(remaining):
                    is_effect = stage in effect_stages
                    key = effect_key_default(workflow_slug=wf.slug, intent=intent, fingerprint=fp, stage=stage) \
                        if is_effect else ""
                    if is_effect and st["effects"].get(stage, {}).get("status") == "unknown":
                        events.append((stage, "verified", "", "{}", '{"system": "git"}',
                                       '[{"uri": "https://ci.example/x", "observed_at": "2024-06-01T00:00:00Z"}]',
                                       key, True))
                        st["effects"][stage].update(status="verified", last_seq=len(events))
                        st["done"][stage] = ("verified", run_id, len(events))
                        passed += 1
                        continue
                    events.append((stage, "started", "", "{}", None, "[]", key, True))
                    if is_effect:
                        st["effects"][stage] = {"status": "attempted", "run": run_id, "claimed": len(events),
                                                "last_seq": len(events), "key": key,
                                                "attempts": st["effects"].get(stage, {}).get("attempts", 0) + 1}
                    if j == fail_at:
                        if is_effect and rng.random() < 0.5:
                            events.append((stage, "unknown", "timeout", "{}", None, "[]", key, True))
                            st["effects"][stage].update(status="unknown", last_seq=len(events))
                        else:
                            events.append((stage, "failed", "stage_failed", '{"error": "exit 1"}', None, "[]",
                                           key, True))
                            if is_effect:
                                st["effects"][stage].update(status="failed", last_seq=len(events))
                        break
                    events.append((stage, "succeeded", "", '{"summary": "ok"}',
                                   '{"system": "git", "operation": "push", "reference": "abc123"}' if is_effect
                                   else None, "[]", key, True))
                    if is_effect:
                        events.append((stage, "verified", "", "{}", None,
                                       '[{"uri": "https://ci.example/x", "observed_at": "2024-06-01T00:00:00Z"}]',
                                       key, True))
                        st["effects"][stage].update(status="verified", last_seq=len(events))
                        st["done"][stage] = ("verified", run_id, len(events))
                    else:
                        st["done"][stage] = ("succeeded", run_id, len(events))
                    passed += 1
                    if passed == 3 or j == len(remaining) - 1:
                        checkpoints.append(len(events))
                if fail_at is not None and passed and (not checkpoints or checkpoints[-1] != len(events)):
                    checkpoints.append(len(events))
                if all(s in st["done"] for s in stages):
                    st["complete"], state = True, "completed"
                    system("transition", "all_stages_done", '{"from": "checkpointed", "to": "completed"}')
                else:
                    state = "failed"
                    system("transition", "stage_failed", '{"from": "execute", "to": "failed"}')

            # events
            prev = "0" * 64
            seq_at = {}
            for seq, (stage, kind, reason_code, data, effect, evidence, idem, agent) in enumerate(events, 1):
                at = t + timedelta(seconds=20 * seq)
                seq_at[seq] = at
                digest = hashlib.sha256(f"{prev}{run_id}{seq}{kind}{stage}".encode()).hexdigest()
                rows["events"].append((run_id, intent, seq, at, stage, kind, "agent:loader" if agent else "system", fp,
                                       wf.policy_version, ENV, idem, effect, evidence, reason_code, data,
                                       uuid.uuid4().hex if agent else None, "", prev, digest))
                prev = digest
            # checkpoints (the state after event ``upto``)
            for upto in checkpoints:
                at = seq_at[upto]
                table = {s: {"status": v[0], "pointer": f"ledger:{v[1]}/{v[2]}"} for s, v in st["done"].items()
                         if v[1] != run_id or v[2] <= upto}
                observed = sorted(e["key"] for s, e in st["effects"].items() if s in table)
                payload = {
                    "stage": stage, "retry_count": 0, "max_retries": 3,
                    "allowed_next_stages": [s for s in stages if s not in table][:1],
                    "observed_effects": observed, "state_table": table,
                    "assertions": [{"stage": s, "pointer": e["pointer"], "digest": hashlib.sha256(
                        e["pointer"].encode()).hexdigest()} for s, e in table.items()],
                    "input_fingerprint": fp, "policy_version": wf.policy_version, "env_fingerprint": ENV,
                    "created_at": at.isoformat(), "expires_at": (at + timedelta(days=1)).isoformat(),
                }
                rows["checkpoints"].append((wf.id, intent, run_id, "server", json.dumps(payload), fp,
                                            wf.policy_version, ENV, None, at, at + timedelta(days=1)))
            # the intent's latest run is complete with effects: every read-path query runs for it
            complete_with_effects = st["complete"] and bool(effect_stages)
            end = seq_at[len(events)]
            stage_states = {s: {"status": v[0], "pointer": f"ledger:{v[1]}/{v[2]}"} for s, v in st["done"].items()}
            rows["runs"].append((run_id, wf.id, intent, "schedule", f"schedule:{run_id}", json.dumps(inputs), fp,
                                 wf.policy_version, ENV, state, json.dumps(decision), "",
                                 json.dumps(stage_states), "scheduler", t, end, end, t, None, "agent:loader",
                                 None, len(events), prev))
        for fp_of, st in fps.items():
            for stage, e in st["effects"].items():
                rows["effects"].append((e["key"], wf.id, intent, fp_of, stage, e["run"], e["status"], "git", "push",
                                        "abc123", e["attempts"], e["claimed"], e["last_seq"], self.now, self.now))
        self.intents.append(IntentInfo(wf.slug, intent, inputs, complete_with_effects))

    # -- loading

    # -- loading

    def load(self, *, events_target: int, runs_target: int, label: str) -> None:
        """Add intents until about ``runs_target`` more runs are loaded; progress every ~5 s."""
        started = time.perf_counter()
        goal_runs = self.totals["runs"] + runs_target
        goal_events = self.totals["events"] + events_target
        batch_runs = max(50, min(5000, runs_target // 10 or 50))
        last_progress = 0.0
        while self.totals["runs"] < goal_runs:
            rows = {"runs": [], "events": [], "checkpoints": [], "effects": []}  # effect keys: from the effects
            while len(rows["runs"]) < batch_runs and self.totals["runs"] + len(rows["runs"]) < goal_runs:
                self._intent_rows(rows)
            with transaction.atomic():
                copy_rows(Run, RUN_FIELDS, rows["runs"])
                copy_rows(LedgerEvent, EVENT_FIELDS, rows["events"])
                copy_rows(Checkpoint, CHECKPOINT_FIELDS, rows["checkpoints"])
                copy_rows(EffectKey, ("idempotency_key", "intent"), ((e[0], e[2]) for e in rows["effects"]))
                copy_rows(Effect, EFFECT_FIELDS, rows["effects"])
            for key in self.totals:
                self.totals[key] += len(rows[key])
            elapsed = time.perf_counter() - started
            if elapsed - last_progress >= 5 or self.totals["runs"] >= goal_runs:
                last_progress = elapsed
                self.say(f"  [{label}] loaded {self.totals['events']:,} / ~{goal_events:,} events, "
                         f"{self.totals['runs']:,} / {goal_runs:,} runs, {self.totals['checkpoints']:,} "
                         f"checkpoints, {self.totals['effects']:,} effects ({elapsed:.1f} s)")
        analyze(Run, RunKey, LedgerEvent, Checkpoint, Effect, EffectKey)


# ---------------------------------------------------------------------------------------------
# claim histories


CLAIM_FIELDS = ("key", "version", "store_version", "status", "statement", "source_refs", "source_type",
                "scope_system", "scope_version", "scope_task", "confidence", "observed_at", "refresh_after",
                "sensitivity", "derived_from", "actor", "reason", "provenance", "pending_reasons",
                "policy_version", "created_at")
HEAD_FIELDS = ("key", "current", "latest_version", "live", "system", "scope_version", "task", "sensitivity",
               "gc_status", "updated_at")


@dataclass
class ClaimsLoaded:
    versions: int
    live_keys: list
    dead_keys: list


def claims_load(*, system: str, prefix: str, n_keys: int, rng: random.Random, now) -> ClaimsLoaded:
    """``n_keys`` keys ``<prefix>k0000000``... in scope (``system``, "1", "bench"), 1-19 versions each
    (10 on average) with store versions reserved from the counter. The latest version is active
    (10 % of those past ``refresh_after``) or, for 10 % of the keys, an ``invalidated`` tombstone.
    Heads are not written: ``claim_heads_build`` does that after."""
    versions = [rng.randint(1, 19) for _ in range(n_keys)]
    total = sum(versions)
    store_version = store_versions_reserve(total) - total + 1
    created = now - timedelta(days=1)
    observed = (now - timedelta(days=2)).isoformat()
    fresh = (now + timedelta(days=20)).isoformat()
    expired = (now - timedelta(hours=1)).isoformat()
    live, dead = [], []

    def rows():
        nonlocal store_version
        for i, n in enumerate(versions):
            key = f"{prefix}k{i:07d}"
            roll = rng.random()
            final = "invalidated" if roll < 0.10 else "active"
            (dead if final == "invalidated" else live).append(key)
            for v in range(1, n + 1):
                status = final if v == n else "active"
                refresh = expired if (v == n and 0.10 <= roll < 0.20) else fresh
                yield (key, v, store_version, status, "" if status != "active" else f"{key} v{v}",
                       json.dumps([f"https://docs.example.com/{key}"]), "official-doc", system, "1", "bench",
                       "reported", observed, refresh if status == "active" else None, "internal", "[]",
                       "agent:bench", "", json.dumps({"action": "bench-load"}), "[]", "bench", created)
                store_version += 1

    copy_rows(Claim, CLAIM_FIELDS, rows())
    return ClaimsLoaded(total, live, dead)


def claim_heads_build(*, system: str) -> int:
    """One head per key of ``system``'s claims, at its latest version (live when that is active)."""
    now = timezone.now()
    latest = list(Claim.objects.filter(scope_system=system).order_by("key", "-version").distinct("key")
                  .values_list("key", "id", "version", "status", "scope_system", "scope_version", "scope_task",
                               "sensitivity"))
    return copy_rows(ClaimHead, HEAD_FIELDS, ((key, pk, version, status == "active", sys_, scope_version, task,
                                               sensitivity, "", now)
                                              for key, pk, version, status, sys_, scope_version, task, sensitivity
                                              in latest))


def rows_delete(queryset) -> int:
    """Delete ``queryset``'s rows in one statement, without the ORM's per-row collection (a scale
    test's cleanup; related rows are the caller's to delete first)."""
    model, quote = queryset.model, connection.ops.quote_name
    sql, params = queryset.values("pk").query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {quote(model._meta.db_table)} WHERE {quote(model._meta.pk.column)} IN ({sql})",
                       params)
        return cursor.rowcount
