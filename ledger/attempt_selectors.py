"""Reads of attempts (SPEC §15): the runs of one workflow, intent and input fingerprint, which §3's retry
budget counts, and the failure that escalated an intent (the most recent failed attempt's)."""

from django.db.models import Count, Exists, F, OuterRef, Q, Subquery, Window
from django.db.models.functions import RowNumber

from ledger.models import Effect, LedgerEvent, Run
from stateboard.redact import redact

ERROR_CHARS = 2000  # the failure's own text shown, at most (SPEC §15)


def _attempts_of(run):
    return Run.objects.filter(workflow_id=run.workflow_id, intent=run.intent, input_fingerprint=run.input_fingerprint)


def run_attempts(*, run, limit: int = 50) -> list:
    """The run's attempts, newest first, the run itself always among them (added last when older than
    the newest ``limit``)."""
    attempts = list(_attempts_of(run).only("id", "state", "decision", "created_at", "ended_at", "input_fingerprint",
                                           "workflow_id", "intent").order_by("-created_at", "-id")[:limit])
    if not any(a.id == run.id for a in attempts):
        attempts.append(run)
    return attempts


def escalating_failure(*, run) -> dict | None:
    """The most recent ``failed`` stage event among the run's attempts (itself included): {run_id, seq, at,
    stage, reason_code, error}, ``error`` being ``data.error`` redacted and cut to 2,000 characters; None when
    no attempt failed a stage."""
    event = (LedgerEvent.objects.filter(intent=run.intent, kind="failed",
                                        run__in=_attempts_of(run).values("id"))
             .order_by("-at", "-seq").only("run_id", "seq", "at", "stage", "reason_code", "data").first())
    if event is None:
        return None
    error = event.data.get("error") if isinstance(event.data, dict) else None
    text = error if isinstance(error, str) else ("" if error is None else str(error))
    return _failure_of({"run_id": event.run_id, "seq": event.seq, "at": event.at, "stage": event.stage,
                        "reason_code": event.reason_code}, text)


def attempt_groups(runs):
    """``runs`` narrowed to one row per attempt group (its latest run), annotated ``attempt_count``."""
    same = Run.objects.filter(workflow_id=OuterRef("workflow_id"), intent=OuterRef("intent"),
                              input_fingerprint=OuterRef("input_fingerprint"))
    newer = same.filter(Q(created_at__gt=OuterRef("created_at"))
                        | Q(created_at=OuterRef("created_at"), id__gt=OuterRef("id")))
    count = same.order_by().values("intent").annotate(n=Count("id")).values("n")[:1]
    return runs.annotate(attempt_count=Subquery(count)).exclude(Exists(newer))


def _failure_of(event, text) -> dict:
    return {"run_id": event["run_id"], "seq": event["seq"], "at": event["at"], "stage": event["stage"],
            "reason_code": event["reason_code"], "error": redact(text[:ERROR_CHARS]), "cut": len(text) > ERROR_CHARS}


def with_failures(runs) -> list:
    """Set ``failure`` (``escalating_failure``'s answer) on each of ``runs`` (a page's rows), in one query:
    the newest ``failed`` event of each attempt group (a window over the groups)."""
    runs = list(runs)
    if not runs:
        return runs
    group = [F("run__workflow_id"), F("run__intent"), F("run__input_fingerprint")]
    newest = (LedgerEvent.objects.filter(intent__in={r.intent for r in runs}, kind="failed",
                                         run__workflow_id__in={r.workflow_id for r in runs})
              .annotate(rank=Window(RowNumber(), partition_by=group, order_by=[F("at").desc(), F("seq").desc()]))
              .filter(rank=1)
              .values("run_id", "seq", "at", "stage", "reason_code", "data", "run__workflow_id", "run__intent",
                      "run__input_fingerprint"))
    found = {}
    for event in newest:
        error = event["data"].get("error") if isinstance(event["data"], dict) else None
        text = error if isinstance(error, str) else ("" if error is None else str(error))
        key = (event["run__workflow_id"], event["run__intent"], event["run__input_fingerprint"])
        found[key] = _failure_of(event, text)
    for run in runs:
        run.failure = found.get((run.workflow_id, run.intent, run.input_fingerprint))
    return runs


def runs_as_they_ran(runs) -> dict:
    """Per run id, what the run itself did, from its own ledger (one read for all of ``runs``):
    ``decision``, the decision it ran under (the latest ``decided`` before its last ``started``; one that
    never started a stage, its first), ``later``, a decision made after it (a retry, goal change or
    rollback deciding it again; None if none), and ``effects``, the effects its events name or its stage
    states stand on, oldest claim first (never a later attempt's). Two reads for all of ``runs``."""
    runs = list(runs)
    events = (LedgerEvent.objects.filter(run_id__in=[r.id for r in runs], intent__in={r.intent for r in runs})
              .filter(Q(kind__in=("decided", "started")) | ~Q(idempotency_key=""))
              .order_by("run_id", "seq").values_list("run_id", "kind", "idempotency_key", "data"))
    seen = {r.id: {"decisions": [], "ran": None, "keys": []} for r in runs}
    for run_id, kind, key, data in events:
        mine = seen[run_id]
        if kind == "decided":
            mine["decisions"].append(data if isinstance(data, dict) else {})
        elif kind == "started":
            mine["ran"] = len(mine["decisions"])
        if key:
            mine["keys"].append(key)
    answer, keys = {}, set()
    for run in runs:
        mine = seen[run.id]
        decisions = mine["decisions"] or [run.decision or {}]
        ran = decisions[max((mine["ran"] or 1) - 1, 0)]
        later = decisions[-1] if decisions[-1] is not ran else None
        stood_on = [(s or {}).get("effect_key") for s in (run.stage_states or {}).values() if isinstance(s, dict)]
        answer[run.id] = {"decision": ran, "later": later, "keys": {*mine["keys"], *filter(None, stood_on)}}
        keys |= answer[run.id]["keys"]
    effects = list(Effect.objects.filter(idempotency_key__in=keys).order_by("created_at", "claimed_seq")) if keys else []
    for mine in answer.values():
        mine["effects"] = [e for e in effects if e.idempotency_key in mine["keys"]]
    return answer
