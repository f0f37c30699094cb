"""Reads of the ledger, shared by pages, the API and the knowledge app.

Every signed-in role reads every run, approval and effect, so these take no ``user``; where a
contract scopes what a user sees (sensitive claims), the selector takes ``user=`` (knowledge)."""

import uuid

from django.db.models import Case, Count, Exists, Max, Min, OuterRef, Prefetch, Q, Subquery, When
from django.utils import timezone

from ledger.domain import projection
from ledger.domain.alerts import OPEN_STATES
from ledger.domain.approval_rules import groups_named, users_named
from ledger.domain.effects import HELD
from ledger.domain.kinds import STAGE_OUTCOME_KINDS
from ledger.domain.machine import INTENT_HOLDING_STATES, ONCALL_STATES
from ledger.filters import OncallRunFilter, RunFilter, id_prefix_q
from ledger.models import Alert, Approval, AuditEntry, Checkpoint, Effect, LedgerEvent, Notification, Run, Workflow
from ledger.store import store
from ledger.store.reads import Reads
from stateboard.roles import EDITOR, users_in_role


def event_is_verified(*, event_id: int) -> bool:
    """True when the ledger event exists and is a ``verified`` event (a claim may rest on it)."""
    return LedgerEvent.objects.filter(id=event_id, kind="verified").exists()


def oldest_live_version_boundary(*, now) -> int | None:
    """Smallest ``version_boundary`` among checkpoints not yet expired (None: no such checkpoint).

    Checkpoints without a boundary hold no knowledge snapshot and cannot resurrect anything.
    """
    return (Checkpoint.objects.filter(expires_at__gt=now, version_boundary__isnull=False)
            .aggregate(m=Min("version_boundary"))["m"])


def run_list():
    """Runs, newest first (every signed-in role sees every run)."""
    return Run.objects.select_related("workflow").order_by("-created_at", "-id")


def run_events(*, run):
    return LedgerEvent.objects.of_run(run).order_by("seq")


def run_by_id(run_id, intent: str | None = None):
    """The run with its workflow; ``Run.DoesNotExist`` if there is none (read through the store: one partition)."""
    return store().runs_by_id(run_id, intent).select_related("workflow").get()


_RUN_DETAIL = Reads(lambda *, run_id, intent: [
    Run.objects.filter(id=run_id, intent=intent),
    Workflow.objects.filter(id=Subquery(Run.objects.filter(id=run_id, intent=intent).values("workflow_id")[:1])),
    Effect.objects.filter(run=run_id, intent=intent).order_by("claimed_seq"),
    Approval.objects.filter(run=run_id).order_by("-created_at")], run_id=uuid.UUID, intent=str)


def run_detail(*, run_id, intent: str | None = None):
    """The run with its workflow, effects (oldest claim first) and approvals (newest first); read in one
    round trip when its intent is known, else after its key."""
    intent = store().intent_of(run_id, intent)
    runs, workflows, effects, approvals = store().reads(_RUN_DETAIL, run_id=run_id, intent=intent) if intent else ([],) * 4
    if not runs:
        raise Run.DoesNotExist(f"No run {run_id}.")
    run, run.workflow = runs[0], workflows[0]
    for effect in effects:
        effect.run, effect.workflow = run, run.workflow
    for approval in approvals:
        approval.run = run
    run._prefetched_objects_cache = {"effects": effects, "approvals": approvals}
    return run


def intent_holding_runs(*, workflow, intent: str):
    """The intent's real runs that hold its work or wait on a human (holding states and ``escalated``):
    what a trigger must see (and lock) before it decides. Staged runs never count (SPEC §10.3)."""
    return Run.objects.filter(workflow=workflow, intent=intent, state__in=INTENT_HOLDING_STATES, staged=False)


def checkpoints_trusted():
    """The checkpoints a decision may trust (SPEC §11.1): the server's, and those saved by the run's lease
    holder (every agent save is; a row older than ``saved_by`` names no saver and is not trusted)."""
    return Checkpoint.objects.exclude(source=Checkpoint.Source.AGENT, saved_by="")


def checkpoint_latest(*, run):
    """The latest trusted checkpoint of the run's intent (``checkpoint_intent_latest``); real runs never
    see a staged run's checkpoints, nor staged runs real ones (SPEC §10.3)."""
    return (checkpoints_trusted().select_related("workflow")
            .filter(workflow_id=run.workflow_id, intent=run.intent, staged=run.staged).order_by("-id").first())


def approval_list(*, status: str | None = None):
    approvals = Approval.objects.select_related("run", "run__workflow").order_by("-created_at", "id")
    return approvals.filter(status=status) if status else approvals


def effect_list():
    return Effect.objects.select_related("workflow").order_by("-created_at", "id")


def alerts_listed(*, state: str = "", workflow: str = "", severity: str = ""):
    """Alerts, open first, newest first, their workflow and history read with them (SPEC §14)."""
    alerts = Alert.objects.select_related("workflow").prefetch_related("changes").order_by(
        Case(When(state="resolved", then=1), default=0), "-opened_at", "-id")
    if state == "open":
        alerts = alerts.filter(state__in=OPEN_STATES)
    elif state:
        alerts = alerts.filter(state=state)
    if workflow:
        alerts = alerts.filter(workflow__slug=workflow)
    return alerts.filter(severity=severity) if severity else alerts


def dashboard_summary(*, since=None) -> dict:
    """The latest runs, the runs created since ``since`` (all when None) by state, pending approvals."""
    counted = Run.objects.filter(created_at__gte=since) if since is not None else Run.objects.all()
    return {
        "recent_runs": list(run_list()[:20]),
        "state_counts": dict(counted.values_list("state").annotate(n=Count("id")).values_list("state", "n")),
        "pending_approvals": Approval.objects.filter(status="pending").count(),
    }


# ---------------------------------------------------------------- pages (added with the HTML views)

COUNT_CAP = 100


def _capped(queryset) -> int:
    """How many, counting at most ``COUNT_CAP + 1`` rows (a page says "100+" past the cap)."""
    return queryset[:COUNT_CAP + 1].count()


def needs_human(*, user) -> dict:
    """What waits for a person now, apart from history (counts, each capped at COUNT_CAP + 1):
    escalated runs and runs whose compensation waits (on-call), high-impact and compensation
    requests (editors), and claims to review (pending, stale or flagged, those ``user`` may see)."""
    from knowledge import selectors as claims

    now = timezone.now()
    stale_or_flagged = claims.claims_live(user=user, now=now).filter(
        Q(current__refresh_after__lte=now) | Q(needs_review=True))  # a head that is both counts once
    return {
        "escalated": _capped(Run.objects.filter(state="escalated")),
        "compensate": _capped(Run.objects.filter(state="compensate")),
        "approvals": _capped(Approval.objects.filter(status="pending").exclude(kind=Approval.Kind.ESCALATION)),
        "claims": min(COUNT_CAP + 1, _capped(claims.claims_pending(user=user)) + _capped(stale_or_flagged)),
    }


def runs_filtered(params) -> RunFilter:
    """The runs page: ``run_list`` narrowed by the run filter (``.qs``; its ``.form`` for the page).
    A value that does not parse is left out (the API refuses it instead)."""
    return RunFilter(params, queryset=run_list())


def oncall_runs(params=None) -> OncallRunFilter:
    """Runs that need on-call attention (escalated, awaiting compensation, failed), by the run filter.

    ``last_reason`` is the reason code of the run's latest transition (why it is where it is),
    read in the same query.
    """
    runs = _with_last_reason(run_list().filter(state__in=ONCALL_STATES))
    return OncallRunFilter(params if params is not None else {}, queryset=runs, states=ONCALL_STATES)


def oncall_run(*, run_id):
    """One run as an on-call row (whatever its state now, e.g. right after a retry)."""
    return _with_last_reason(run_list()).get(id=run_id)


def with_superseded(runs):
    """Annotate ``superseded_by``: the id of a later run of the same intent that completed (the
    failure is history then, not work), else None."""
    later = (Run.objects.filter(workflow_id=OuterRef("workflow_id"), intent=OuterRef("intent"), state="completed",
                                created_at__gt=OuterRef("created_at")).order_by("created_at").values("id")[:1])
    return runs.annotate(superseded_by=Subquery(later))


def _with_last_reason(runs):
    """Annotate ``last_reason``, ``compensable`` and ``superseded_by`` (``with_superseded``).

    ``compensable`` mirrors ``services.compensation_plan(run) is not None`` in the same query (the
    on-call page offers Compensate only then); tests/ledger/web/test_oncall_desk.py checks they agree.
    """
    last_reason = (LedgerEvent.objects.filter(run=OuterRef("pk"), intent=OuterRef("intent"), kind="transition")
                   .order_by("-seq").values("reason_code")[:1])
    undoable = Effect.objects.filter(workflow_id=OuterRef("workflow_id"), intent=OuterRef("intent"),
                                     input_fingerprint=OuterRef("input_fingerprint"), status__in=HELD)
    return with_superseded(runs.annotate(last_reason=Subquery(last_reason), has_undoable=Exists(undoable),
                                         has_unreferenced=Exists(undoable.filter(reference=""))))


def workflow_list():
    return Workflow.objects.order_by("slug")


def approvals_pending():
    """Pending requests, oldest deadline first (what needs a decision soonest)."""
    return approval_list(status="pending").order_by("deadline", "id")


def approvals_pending_count() -> int:
    """How many requests are pending (counted up to the cap: ``_capped``)."""
    return _capped(Approval.objects.filter(status="pending"))


def approval_get(*, approval_id):
    return approval_list().get(id=approval_id)


def run_audit_entries(*, run):
    """Audited human actions on the run (refused attempts included), newest first."""
    return AuditEntry.objects.filter(run=run).order_by("-at", "-id")


def notifications_for(*, user, unread: bool = False):
    """The user's notifications, newest first; ``unread`` hides the read ones."""
    rows = Notification.objects.filter(user_id=user.pk).order_by("-created_at", "-id")
    return rows.filter(read_at__isnull=True) if unread else rows


def notifications_unread_count(*, user) -> int:
    return notifications_for(user=user, unread=True).count()


# ---------------------------------------------------------------- run page, compare, inbox (second pass)

def run_events_page(*, run, before: int | None = None, from_seq: int | None = None, limit: int = 50) -> list:
    """Newest events first: a page of ``limit`` before ``before``, or (live refresh) all from ``from_seq`` on."""
    events = LedgerEvent.objects.of_run(run).order_by("-seq")
    if before is not None:
        events = events.filter(seq__lt=before)
    if from_seq is not None:
        return list(events.filter(seq__gte=from_seq)[:max(limit, 500)])
    return list(events[:limit])


def run_transitions(*, run) -> list[dict]:
    """The run's transition events, in order ({seq, at, stage, reason_code, from, to, cause}): its path."""
    rows = (LedgerEvent.objects.of_run(run).filter(kind="transition").order_by("seq")
            .values_list("seq", "at", "stage", "reason_code", "data"))
    return [{**(data if isinstance(data, dict) else {}), "seq": seq, "at": at, "stage": stage, "reason_code": reason}
            for seq, at, stage, reason, data in rows]


def run_stage_events(*, run) -> list[tuple[str, str, object]]:
    """(stage, kind, at) of the run's stage events (outcomes, approval requests), oldest first: its timeline."""
    return list(LedgerEvent.objects.of_run(run).filter(kind__in=(*STAGE_OUTCOME_KINDS, "approval_requested"))
                .exclude(stage="").order_by("seq").values_list("stage", "kind", "at"))


def stage_times(*, run) -> dict[str, dict]:
    """Per stage: first ``started`` and last outcome moment, from the ledger (one grouped read)."""
    rows = (LedgerEvent.objects.of_run(run).filter(kind__in=STAGE_OUTCOME_KINDS).exclude(stage="")
            .values("stage").annotate(start=Min("at", filter=Q(kind="started")), end=Max("at")))
    return {r["stage"]: {"start": r["start"], "end": r["end"]} for r in rows}


def run_by_prefix(*, prefix: str) -> list:
    """Runs whose id (hex digits, hyphens ignored) starts with ``prefix``, by the run filter's ``q``;
    at most two (unique or not). A prefix that also matches intents is not a prefix lookup."""
    return list(run_list().filter(id_prefix_q(prefix) or Q(pk__in=[])).values_list("id", flat=True)[:2])


def runs_by_ids(*, ids) -> dict:
    runs = (run_list().filter(id__in=ids)
            .prefetch_related(Prefetch("effects", queryset=Effect.objects.order_by("claimed_seq"))))
    return {str(r.id): r for r in runs}


def checkpoints_of_runs(*, run_ids) -> dict:
    """The latest checkpoint each run saved, by run id."""
    latest = {}
    for cp in Checkpoint.objects.filter(run_id__in=run_ids).order_by("run_id", "-id"):
        latest.setdefault(str(cp.run_id), cp)
    return latest


def approvals_decided(*, status: str = "", kind: str = "", workflow: str = ""):
    """Decided requests (approved, rejected, expired), newest decision first, narrowed by the filters."""
    approvals = approval_list().exclude(status="pending")
    if status:
        approvals = approvals.filter(status=status)
    if kind:
        approvals = approvals.filter(kind=kind)
    if workflow:
        approvals = approvals.filter(run__workflow__slug=workflow)
    return approvals.order_by("-decided_at", "-created_at")


def approval_packs(*, approvals) -> dict:
    """Per approval id: the run's verified effects and evidence, and the last completed run of the intent
    before it (to say what changed). Three reads whatever the number of requests."""
    run_ids = {a.run_id for a in approvals}
    if not run_ids:
        return {}
    runs = {a.run_id: a.run for a in approvals}
    intents = {r.intent for r in runs.values()}  # (each intent's own partition, on PostgreSQL)
    effects: dict = {}
    for effect in Effect.objects.filter(run_id__in=run_ids, intent__in=intents, status="verified").order_by("claimed_seq"):
        effects.setdefault(effect.run_id, []).append(effect)
    evidence: dict = {}
    for event in (LedgerEvent.objects.filter(run_id__in=run_ids, intent__in=intents, kind="verified").exclude(evidence=[])
                  .only("run_id", "seq", "stage", "evidence").order_by("seq")):
        evidence.setdefault(event.run_id, []).append(event)
    previous = (Run.objects.filter(workflow_id__in={r.workflow_id for r in runs.values()},
                                   intent__in={r.intent for r in runs.values()}, state="completed")
                .exclude(id__in=run_ids).only("id", "workflow_id", "intent", "inputs", "created_at")
                .order_by("-created_at"))
    last_verified: dict = {}
    for prior in previous[:1000]:
        last_verified.setdefault((prior.workflow_id, prior.intent), []).append(prior)
    packs = {}
    for approval in approvals:
        run = approval.run
        prior = next((p for p in last_verified.get((run.workflow_id, run.intent), [])
                      if p.created_at < run.created_at), None)
        packs[approval.id] = {"effects": effects.get(run.id, []), "evidence": evidence.get(run.id, []),
                              "previous": prior}
    return packs


DECIDERS_SHOWN = 20


def approval_deciders(*, approvals) -> dict:
    """Per pending request (escalations apart): who may still decide it (SPEC §17) — ``any_editor`` when its
    approvers hold ``role:editor``, else the editors they name (by name or approver group) — less who voted and
    the requester. One read whatever the number of requests."""
    pending = [a for a in approvals if a.status == "pending" and a.kind != Approval.Kind.ESCALATION]
    users = set().union(*(users_named(a.approvers) for a in pending))
    groups = set().union(*(groups_named(a.approvers) for a in pending))
    groups_of: dict = {}
    if users or groups:
        editors = users_in_role(EDITOR).filter(Q(username__in=users) | Q(approver_groups__name__in=groups))
        for username, group in editors.values_list("username", "approver_groups__name"):
            groups_of.setdefault(username, set()).add(group)
    deciders = {}
    for approval in pending:
        gone = {vote["by"] for vote in approval.votes} | {approval.requested_by}
        named, wanted = users_named(approval.approvers), groups_named(approval.approvers)
        names = sorted(name for name, in_groups in groups_of.items() if f"user:{name}" not in gone
                       and (name in named or in_groups & wanted))
        deciders[approval.id] = {"any_editor": "role:editor" in approval.approvers, "names": names[:DECIDERS_SHOWN],
                                 "more": max(0, len(names) - DECIDERS_SHOWN)}
    return deciders


def policy_history(*, workflow, limit: int = 50):
    return AuditEntry.objects.filter(action="policy_bump", target=workflow.slug).order_by("-at", "-id")[:limit]


def effects_rebuild_diff() -> list[str]:
    """Compare stored effects with a replay of the whole ledger; [] means they are equal."""
    runs = {str(r[0]): (r[1], r[2], r[3]) for r in Run.objects.values_list("id", "workflow_id", "intent",
                                                                             "input_fingerprint")}
    stages = {w.id: set(w.effect_stages) for w in Workflow.objects.all()}
    replayed = projection.effects_replay(LedgerEvent.objects.order_by("id").iterator(chunk_size=5000), runs, stages)
    stored = {e.idempotency_key: {"stage": e.stage, "run": str(e.run_id), "status": e.status, "system": e.system,
                                  "operation": e.operation, "reference": e.reference, "attempts": e.attempts}
              for e in Effect.objects.all()}
    diffs = []
    for key in sorted(set(replayed) | set(stored)):
        a, b = replayed.get(key), stored.get(key)
        if a != b:
            diffs.append(f"{key}: ledger={a} stored={b}")
    return diffs


def effects_of(*, workflow_id: int, intent: str, fingerprint: str):
    """The effects of one intent and fingerprint: the scope every decision, resume, rollback and
    compensation works in (a run's own effects, and those of the earlier attempts it resumes)."""
    return Effect.objects.filter(workflow_id=workflow_id, intent=intent, input_fingerprint=fingerprint)


def effects_of_intent(*, run):
    """``effects_of`` the run's intent and fingerprint, oldest claim first."""
    return effects_of(workflow_id=run.workflow_id, intent=run.intent,
                      fingerprint=run.input_fingerprint).order_by("claimed_seq", "id")


def stage_effect_statuses(effect_rows) -> dict[str, str]:
    """{stage: status of its latest claimed effect} of ``effects_of_intent`` rows."""
    return {effect.stage: effect.status for effect in effect_rows}


def person_of(user) -> dict:
    """A person's page (SPEC §17): their approver groups (no role) and single sign-on identities."""
    return {"approver_groups": list(user.approver_groups.order_by("name").values_list("name", flat=True)),
            "sso_issuers": list(user.sso_identities.order_by("issuer").values_list("issuer", flat=True))}
