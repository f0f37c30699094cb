"""Alerts (SPEC §14): the evaluator beat runs every minute, on-call's acknowledge / resolve, silences.

Each change of an alert is one ``AlertChange`` row and, unless its rule is silenced, one outbox row per
channel of the rule (``alert_delivery``), written in the change's transaction. Evaluation is idempotent
across concurrent beats: an alert is opened by an insert the partial unique index (one open alert per key)
lets through once, and closed by an UPDATE guarded by its open state, so only the beat that wrote the row
records the change.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

from croniter import croniter
from django.db import IntegrityError, transaction
from django.db.models import Count, Min, Q
from django.utils import timezone

from ledger import authorizers
from ledger.domain.alerts import AGED_STATES, BAD_ENDS, ESCALATED, GOOD_ENDS, OPEN_STATES, SYSTEM
from ledger.domain.attributes import rule_selection
from ledger.filters import attributes_selected
from ledger.models import Alert, AlertChange, AlertSilence, Approval, Effect, Run, Workflow
from ledger.services.alert_delivery import change_deliver, silence_release
from ledger.services.audit import audit_record
from stateboard.errors import Conflict, NotFound
from stateboard.roles import actor_for

TICK_FORMAT = "%Y-%m-%dT%H:%MZ"
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Finding:
    """A condition that holds now: the subject it is about, what to say, what it concerns."""

    subject: str
    summary: str
    run_id: object = None
    approval_id: object = None


# ---------------------------------------------------------------- the five kinds

def _selected(queryset, rule: dict, field: str = "attributes"):
    """``queryset`` narrowed to the runs the rule's ``attributes`` select (SPEC §15: each key equal, as
    ``attr.<key>=<value>`` would; ``field`` the path to the run's attributes)."""
    return attributes_selected(queryset, rule_selection(rule.get("attributes")), field)


def _absence_holds(workflow: Workflow, rule: dict, tick: datetime) -> bool:
    """No run of the workflow completed since ``tick`` (with ``stage``: verified an effect of that stage)."""
    if rule.get("stage"):
        return not _selected(Effect.objects.filter(workflow=workflow, stage=rule["stage"], status="verified",
                                                   updated_at__gte=tick), rule, "run__attributes").exists()
    return not _selected(Run.objects.filter(workflow=workflow, state="completed", ended_at__gte=tick), rule).exists()


def _tick_of(subject: str) -> datetime:
    return datetime.strptime(subject, TICK_FORMAT).replace(tzinfo=dt_timezone.utc)


def _absence(workflow, rule, now, open_subjects) -> list[Finding]:
    """The latest tick whose ``within_minutes`` have passed, and the ticks of the open alerts, if no run came."""
    due = now.astimezone(dt_timezone.utc) - timedelta(minutes=rule["within_minutes"])
    latest = croniter(rule["cron"], due + timedelta(seconds=1)).get_prev(datetime).astimezone(dt_timezone.utc)
    ticks = {_tick_of(s) for s in open_subjects}
    if latest >= workflow.created_at:  # a tick before the workflow existed expected nothing
        ticks.add(latest)
    what = f"verified {rule['stage']}" if rule.get("stage") else "completed"
    return [Finding(tick.strftime(TICK_FORMAT), f"No run {what} within {rule['within_minutes']} min of the "
                                                f"{tick.strftime(TICK_FORMAT)} tick.")
            for tick in sorted(ticks) if _absence_holds(workflow, rule, tick)]


def _failure_rate(workflow, rule, now, open_subjects) -> list[Finding]:
    since = now - timedelta(minutes=rule["window_minutes"])
    runs = _selected(Run.objects.filter(workflow=workflow, staged=False), rule)
    bad = runs.filter(Q(state__in=BAD_ENDS, ended_at__gte=since)
                      | Q(state=ESCALATED, updated_at__gte=since))  # (an escalated run has no ended_at)
    good = runs.filter(state__in=GOOD_ENDS, ended_at__gte=since)
    bad_n, good_n = bad.count(), good.count()
    ended = bad_n + good_n
    if ended < rule["min_runs"] or bad_n / ended < rule["threshold"]:
        return []
    last = bad.order_by("-updated_at").values_list("id", flat=True).first()
    return [Finding("rate", f"{bad_n} of {ended} runs ended badly in {rule['window_minutes']} min "
                            f"({bad_n / ended:.0%} ≥ {rule['threshold']:.0%}).", run_id=last)]


def _escalation_age(workflow, rule, now, open_subjects) -> list[Finding]:
    # An escalated run does not change until on-call acts: its updated_at is when it started waiting.
    waiting = _selected(Run.objects.filter(workflow=workflow, state__in=AGED_STATES,
                                           updated_at__lte=now - timedelta(minutes=rule["minutes"])), rule)
    return [Finding(str(run_id), f"Run {run_id} has waited in {state} for over {rule['minutes']} min.",
                    run_id=run_id) for run_id, state in waiting.values_list("id", "state")]


def _approval_age(workflow, rule, now, open_subjects) -> list[Finding]:
    pending = _selected(Approval.objects.filter(run__workflow=workflow, status="pending",
                                                created_at__lte=now - timedelta(minutes=rule["minutes"])).exclude(
        kind=Approval.Kind.ESCALATION), rule, "run__attributes")  # escalation requests: escalation_age
    return [Finding(str(approval_id), f"Approval {approval_id} ({stage}) pending for over {rule['minutes']} min.",
                    run_id=run_id, approval_id=approval_id)
            for approval_id, run_id, stage in pending.values_list("id", "run_id", "stage")]


def _queue_age(workflow, rule, now, open_subjects) -> list[Finding]:
    queued = _selected(Run.objects.filter(workflow=workflow, queued_until__isnull=False,
                                          queued_at__lte=now - timedelta(minutes=rule["minutes"])), rule)
    stats = queued.aggregate(n=Count("id"), oldest=Min("queued_at"))
    if not stats["n"]:
        return []
    oldest = queued.order_by("queued_at").values_list("id", flat=True).first()
    return [Finding("queue", f"{stats['n']} run(s) queued over {rule['minutes']} min with no agent leasing them.",
                    run_id=oldest)]


CONDITIONS = {"absence": _absence, "failure_rate": _failure_rate, "escalation_age": _escalation_age,
              "approval_age": _approval_age, "queue_age": _queue_age}


# ---------------------------------------------------------------- changes

def _silenced(workflow_id: int, rule: str, now) -> bool:
    return AlertSilence.objects.filter(workflow_id=workflow_id, rule=rule, until__gt=now).exists()


def _record(alert: Alert, state: str, *, by: str, reason: str, now) -> AlertChange:
    change = AlertChange.objects.create(alert=alert, state=state, by=by, at=now, reason=reason)
    if not _silenced(alert.workflow_id, alert.rule, now):
        change_deliver(alert, change)
    return change


def _open(workflow: Workflow, rule: dict, finding: Finding, now) -> Alert | None:
    """The alert for the finding, unless one is open for its key (then nothing is written)."""
    alert = Alert(key=f"{workflow.slug}/{rule['name']}/{finding.subject}", workflow=workflow, rule=rule["name"],
                  kind=rule["kind"], severity=rule["severity"], state="firing", subject=finding.subject,
                  summary=finding.summary[:1000], run_id=finding.run_id, approval_id=finding.approval_id,
                  opened_at=now, updated_at=now)
    try:
        with transaction.atomic():
            alert.save(force_insert=True)
    except IntegrityError:  # open already (another beat, or an earlier pass)
        return None
    _record(alert, "firing", by=SYSTEM, reason=finding.summary, now=now)
    return alert


def _close(alert_id: int, *, by: str, reason: str, now, expect=OPEN_STATES) -> Alert | None:
    """Resolve an open alert; None when it was resolved meanwhile (by another beat or person)."""
    if not Alert.objects.filter(id=alert_id, state__in=expect).update(state="resolved", updated_at=now,
                                                                        resolved_at=now):
        return None
    alert = Alert.objects.select_related("workflow").get(id=alert_id)
    _record(alert, "resolved", by=by, reason=reason, now=now)
    return alert


def _rule_evaluate(workflow: Workflow, rule: dict, now) -> tuple[int, int]:
    open_alerts = dict(Alert.objects.filter(workflow=workflow, rule=rule["name"], state__in=OPEN_STATES)
                       .values_list("subject", "id"))
    findings = {f.subject: f for f in CONDITIONS[rule["kind"]](workflow, rule, now, set(open_alerts))}
    opened = sum(1 for subject, finding in findings.items()
                 if subject not in open_alerts and _open(workflow, rule, finding, now))
    closed = sum(1 for subject, alert_id in open_alerts.items()
                 if subject not in findings and _close(alert_id, by=SYSTEM, reason="The condition no longer holds.",
                                                       now=now))
    return opened, closed


def alerts_evaluate(now=None) -> dict:
    """One pass over every rule of every active workflow; returns {"opened", "resolved", "released"}. Each rule
    in its own transaction; alerts of a rule no longer defined (or of an archived workflow) are resolved."""
    now = now or timezone.now()
    opened = closed = 0
    for workflow in Workflow.objects.all():
        rules = {rule.get("name"): rule for rule in workflow.alerts if isinstance(rule, dict)} \
            if workflow.archived_at is None else {}
        for rule in rules.values():
            try:
                with transaction.atomic():
                    o, c = _rule_evaluate(workflow, rule, now)
            except Exception:  # one rule that cannot be read (an imported definition) stops no other
                logger.exception("alerts: the rule %s/%s was not evaluated", workflow.slug, rule.get("name"))
                continue
            opened, closed = opened + o, closed + c
        for alert_id in Alert.objects.filter(workflow=workflow, state__in=OPEN_STATES).exclude(
                rule__in=list(rules)).values_list("id", flat=True):
            with transaction.atomic():
                closed += bool(_close(alert_id, by=SYSTEM, reason="The rule was removed.", now=now))
    return {"opened": opened, "resolved": closed, "released": silence_release(now)}


# ---------------------------------------------------------------- people's actions

def _alert_locked(alert_id) -> Alert:
    alert = Alert.objects.select_for_update(of=("self",)).select_related("workflow").filter(id=alert_id).first()
    if alert is None:
        raise NotFound("alert_not_found", f"No alert {alert_id}.")
    if alert.state == "resolved":
        raise Conflict("alert_resolved", "The alert is resolved.", state=alert.state)
    return alert


@transaction.atomic
def alert_acknowledge(*, alert_id, user, note: str = "", now=None) -> Alert:
    """On-call has seen it: firing → acknowledged (acknowledging again records the note, moves nothing)."""
    authorizers.may_handle_alert(user)
    now = now or timezone.now()
    alert = _alert_locked(alert_id)
    alert.state, alert.updated_at = "acknowledged", now
    alert.save(update_fields=["state", "updated_at"])
    _record(alert, "acknowledged", by=actor_for(user), reason=note, now=now)
    return alert


@transaction.atomic
def alert_resolve(*, alert_id, user, reason: str, now=None) -> Alert:
    authorizers.may_handle_alert(user)
    alert = _alert_locked(alert_id)
    return _close(alert.id, by=actor_for(user), reason=reason, now=now or timezone.now())


def _rule_require(workflow: Workflow, rule: str) -> None:
    if rule not in {r.get("name") for r in workflow.alerts}:
        raise NotFound("alert_rule_not_found", f"The workflow {workflow.slug!r} has no alert rule {rule!r}.")


@transaction.atomic
def silence_set(*, workflow: Workflow, rule: str, minutes: int, reason: str, user, now=None) -> AlertSilence:
    """Silence ``rule`` for ``minutes`` from now (a silence in force is replaced); audited."""
    authorizers.may_silence_alert(user, workflow)
    _rule_require(workflow, rule)
    now = now or timezone.now()
    silence, _ = AlertSilence.objects.update_or_create(
        workflow=workflow, rule=rule, defaults={"until": now + timedelta(minutes=minutes), "reason": reason,
                                                "by": actor_for(user), "by_user": user, "created_at": now,
                                                "released_at": None})
    audit_record(user=user, action="alert_silence", outcome="done", target=f"{workflow.slug}/{rule}", reason=reason,
                 data={"minutes": minutes, "until": silence.until.isoformat()})
    return silence


@transaction.atomic
def silence_end(*, workflow: Workflow, rule: str, user, now=None) -> int:
    """End a silence early (audited); its rule's open alerts are delivered once, now."""
    authorizers.may_silence_alert(user, workflow)
    _rule_require(workflow, rule)
    now = now or timezone.now()
    ended = AlertSilence.objects.filter(workflow=workflow, rule=rule, until__gt=now).update(until=now)
    if not ended:
        raise NotFound("silence_not_found", f"The rule {rule!r} of {workflow.slug!r} is not silenced.")
    audit_record(user=user, action="alert_silence_end", outcome="done", target=f"{workflow.slug}/{rule}")
    return silence_release(now, workflow=workflow, rule=rule)
