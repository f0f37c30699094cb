"""Reads of attempts (SPEC §15): the runs of one workflow, intent and input fingerprint, which §3's retry
budget counts, and the failure that escalated an intent (the most recent failed attempt's)."""

from django.db.models import Count, Exists, OuterRef, Q, Subquery

from ledger.models import LedgerEvent, Run
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
    return {"run_id": event.run_id, "seq": event.seq, "at": event.at, "stage": event.stage,
            "reason_code": event.reason_code, "error": redact(text[:ERROR_CHARS]),
            "cut": len(text) > ERROR_CHARS}


def attempt_groups(runs):
    """``runs`` narrowed to one row per attempt group (its latest run), annotated ``attempt_count``."""
    same = Run.objects.filter(workflow_id=OuterRef("workflow_id"), intent=OuterRef("intent"),
                              input_fingerprint=OuterRef("input_fingerprint"))
    newer = same.filter(Q(created_at__gt=OuterRef("created_at"))
                        | Q(created_at=OuterRef("created_at"), id__gt=OuterRef("id")))
    count = same.order_by().values("intent").annotate(n=Count("id")).values("n")[:1]
    return runs.annotate(attempt_count=Subquery(count)).exclude(Exists(newer))
