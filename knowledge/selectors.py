"""Reads of the knowledge store. Time-dependent truth (stale → lead) is computed here, at read time."""

from datetime import datetime

from django.db.models import Count, Exists, F, OuterRef, Q, QuerySet, Subquery
from django.utils import timezone

from knowledge.models import (
    TOMBSTONE_STATUSES,
    Claim,
    ClaimCitation,
    ClaimHead,
    ClaimReview,
    ClaimStatus,
    GateDecision,
    PacketClaim,
    PacketServed,
    Sensitivity,
    StoreCounter,
)
from stateboard.roles import EDITOR, OWNER, has_role, is_agent


def store_version() -> int:
    """The store-wide monotonic version of the knowledge store (0 while empty)."""
    value = StoreCounter.objects.filter(id=1).values_list("value", flat=True).first()
    return int(value or 0)


# ---------------------------------------------------------------------------------------------
# who sees what

def _viewer_owner_ids(user) -> list[int]:
    """Users whose sensitive claims ``user`` may read: themselves, or an agent's owning user."""
    if user is None:
        return []
    ids = [user.pk]
    if is_agent(user):
        agent = getattr(user, "agent", None)
        if agent is not None and agent.owner_id is not None:
            ids.append(agent.owner_id)
    return ids


def sees_all_sensitive(user) -> bool:
    return user is None or (has_role(user, OWNER, EDITOR) and not is_agent(user))


def claim_visible_q(user, *, prefix: str = "") -> Q:
    """Sensitive claims are served to owners and editors, the claim's owner and its owner's agents."""
    if sees_all_sensitive(user):
        return Q()
    return ~Q(**{f"{prefix}sensitivity": Sensitivity.SENSITIVE}) | Q(**{f"{prefix}owner_id__in": _viewer_owner_ids(user)})


def _open_review_exists():
    return Exists(ClaimReview.objects.filter(key=OuterRef("key"),
                                             source_store_version__gt=OuterRef("current__store_version")))


# ---------------------------------------------------------------------------------------------
# retrieval

def claims_live(*, user, system: str | None = None, version: str | None = None, task: str | None = None,
                key: str | None = None, use_as: str | None = None, after_key: str | None = None,
                now: datetime | None = None) -> QuerySet[ClaimHead]:
    """Current live claims (active or stale), never tombstones or pending versions, by key.

    Reads ``ClaimHead`` through its partial index on (system, task, key) WHERE live, one row per
    key, joined to the current version by primary key: history is never scanned. Each head is
    annotated ``needs_review`` (a claim it derives from was tombstoned since its current version).
    ``use_as``: "fact" (active and not flagged) or "lead" (stale, or flagged for review).
    """
    now = now or timezone.now()
    heads = (ClaimHead.objects.filter(live=True).filter(claim_visible_q(user))
             .select_related("current", "current__owner").annotate(needs_review=_open_review_exists()))
    if system:
        heads = heads.filter(system=system)
    if task:
        heads = heads.filter(task=task)
    if version:
        heads = heads.filter(scope_version=version)
    if key:
        heads = heads.filter(key=key)
    if after_key:
        heads = heads.filter(key__gt=after_key)
    if use_as == "fact":
        heads = heads.filter(current__refresh_after__gt=now, needs_review=False)
    elif use_as == "lead":
        heads = heads.filter(Q(current__refresh_after__lte=now) | Q(needs_review=True))
    return heads.order_by("key")


def claim_status(claim: Claim, *, now: datetime | None = None) -> str:
    """Stored status, with ``active`` past its refresh_after reported as ``stale``."""
    now = now or timezone.now()
    if claim.status == ClaimStatus.ACTIVE and claim.refresh_after is not None and claim.refresh_after <= now:
        return "stale"
    return claim.status


def claim_use_as(claim: Claim, *, now: datetime | None = None, needs_review: bool = False) -> str | None:
    """How an agent may use the version: "fact", "lead", or None (not to be used at all)."""
    status = claim_status(claim, now=now)
    if status == ClaimStatus.ACTIVE:
        return "lead" if needs_review else "fact"
    if status == "stale":
        return "lead"
    return None


def claim_detail(*, user, key: str) -> dict | None:
    """A key's current value, full visible history, open review flags and recent gate rejections."""
    head = ClaimHead.objects.filter(key=key).select_related("current", "current__owner").first()
    versions = list(Claim.objects.filter(key=key).filter(claim_visible_q(user))
                    .select_related("owner").order_by("-version"))
    if not versions and not (head and head.gc_status and sees_all_sensitive(user)):
        return None
    current = head.current if head and head.current_id else None
    if current is not None and not any(v.pk == current.pk for v in versions):
        return None  # the current value is sensitive and hidden from this user
    reviews = []
    if current is not None:
        reviews = list(ClaimReview.objects.filter(key=key, source_store_version__gt=current.store_version))
    rejections = list(GateDecision.objects.filter(key=key, outcome=GateDecision.Outcome.REJECTED)[:20])
    current_sv = current.store_version if current else (head.gc_store_version or 0) if head else 0
    pending = [v for v in versions if v.status == ClaimStatus.PENDING and v.store_version > current_sv]
    return {"key": key, "head": head, "current": current, "versions": versions, "pending": pending,
            "reviews": reviews, "rejections": rejections}


# ---------------------------------------------------------------------------------------------
# review queues (pages)

def claim_pending(*, key: str, version: int) -> Claim | None:
    return Claim.objects.filter(key=key, version=version, status=ClaimStatus.PENDING).first()


def claims_pending(*, user) -> QuerySet[Claim]:
    """Pending versions newer than their key's current value: what reviewers must decide."""
    current_sv = Subquery(ClaimHead.objects.filter(key=OuterRef("key")).values("current__store_version")[:1])
    return (Claim.objects.filter(status=ClaimStatus.PENDING).filter(claim_visible_q(user))
            .annotate(head_current_sv=current_sv)
            .filter(Q(head_current_sv__isnull=True) | Q(store_version__gt=F("head_current_sv")))
            .order_by("-store_version"))


def claims_stale(*, user, now: datetime | None = None) -> QuerySet[ClaimHead]:
    """Live claims past refresh_after (served as leads): owners should refresh or invalidate them."""
    now = now or timezone.now()
    return claims_live(user=user, now=now).filter(current__refresh_after__lte=now).order_by("current__refresh_after")


def claims_flagged(*, user) -> QuerySet[ClaimHead]:
    """Live claims derived from a claim that was tombstoned after them."""
    return claims_live(user=user).filter(needs_review=True)


# ---------------------------------------------------------------------------------------------
# metrics

def knowledge_metrics(*, since: datetime | None = None, now: datetime | None = None) -> dict:
    """Write-gate rejection rate and stale-claim-as-fact rate (with their counts) since ``since``.

    Rates are None when nothing was measured in the window (no data is not 0%).
    """
    now = now or timezone.now()
    decisions = GateDecision.objects.all()
    citations = ClaimCitation.objects.all()
    if since is not None:
        decisions = decisions.filter(at__gte=since)
        citations = citations.filter(at__gte=since)
    gate = decisions.aggregate(
        evaluated=Count("id"),
        rejected=Count("id", filter=Q(outcome=GateDecision.Outcome.REJECTED)),
        pending=Count("id", filter=Q(outcome=GateDecision.Outcome.PENDING)),
        accepted=Count("id", filter=Q(outcome=GateDecision.Outcome.ACTIVE)),
    )
    counted = citations.aggregate(
        n_total=Count("id"),
        n_not_fact=Count("id", filter=Q(stale=True) | Q(tombstoned=True) | Q(superseded=True)),
        n_stale=Count("id", filter=Q(stale=True)),
        n_tombstoned=Count("id", filter=Q(tombstoned=True)),
        n_superseded=Count("id", filter=Q(superseded=True)),
        n_unknown=Count("id", filter=Q(found=False, tombstoned=False)),
    )
    cited = {name[2:]: value for name, value in counted.items()}
    heads = ClaimHead.objects.filter(live=True).aggregate(
        n_live=Count("id"), n_stale=Count("id", filter=Q(current__refresh_after__lte=now)))
    live = {"live": heads["n_live"], "stale": heads["n_stale"]}
    return {
        "write_gate_rejection_rate": gate["rejected"] / gate["evaluated"] if gate["evaluated"] else None,
        "stale_claim_as_fact_rate": cited["not_fact"] / cited["total"] if cited["total"] else None,
        "write_gate": gate,
        "citations": cited,
        "claims": {**live, "store_version": store_version()},
        "since": since.isoformat() if since else None,
    }


# ---------------------------------------------------------------------------------------------
# the claims page

def claims_current(*, user, q: str = "", system: str = "", task: str = "", now: datetime | None = None):
    """Current live claims visible to ``user``, searched by key or statement and narrowed by scope."""
    heads = claims_live(user=user, system=system or None, task=task or None, now=now)
    if q:
        heads = heads.filter(Q(key__icontains=q) | Q(current__statement__icontains=q))
    return heads


def claim_head(*, user, key: str) -> ClaimHead | None:
    """One key's head as a row of the claims page after an action: its current value, live or a
    tombstone, annotated ``needs_review`` like ``claims_live``; None when ``user`` may not read it."""
    return (ClaimHead.objects.filter(key=key).filter(claim_visible_q(user))
            .select_related("current", "current__owner").annotate(needs_review=_open_review_exists()).first())


def claim_scopes(*, user) -> dict:
    """The systems and tasks that live claims are scoped to (for the filters)."""
    live = ClaimHead.objects.filter(live=True).filter(claim_visible_q(user))
    return {"systems": list(live.exclude(system="").values_list("system", flat=True).distinct().order_by("system")),
            "tasks": list(live.exclude(task="").values_list("task", flat=True).distinct().order_by("task"))}


def claim_citing_runs(*, keys, per_key: int = 5) -> dict:
    """Per key: how many ledger events cited it and the latest citing run ids (one read for all keys)."""
    out: dict = {}
    for key, run_id in (ClaimCitation.objects.filter(key__in=list(keys)).exclude(run_id="")
                        .order_by("key", "-at").values_list("key", "run_id")[:5000]):
        entry = out.setdefault(key, {"count": 0, "runs": []})
        entry["count"] += 1
        if run_id not in entry["runs"] and len(entry["runs"]) < per_key:
            entry["runs"].append(run_id)
    return out


# ---------------------------------------------------------------------------------------------
# what resume packets served (the run page, a claim's page)

def claims_left_out(*, user, system: str | None, task: str | None, limit: int = 20) -> list[tuple[str, int, str]]:
    """(key, version, reason) of the scope's claims a packet never serves although ``user`` may read them:
    tombstones (``revoked``, ``invalidated``) and versions pending review (``pending``)."""
    heads = ClaimHead.objects.filter(live=False, current__status__in=TOMBSTONE_STATUSES).filter(claim_visible_q(user))
    pending = claims_pending(user=user)
    if system:
        heads, pending = heads.filter(system=system), pending.filter(scope_system=system)
    if task:
        heads, pending = heads.filter(task=task), pending.filter(scope_task=task)
    out = [(key, version, status) for key, version, status in
           heads.order_by("key").values_list("key", "current__version", "current__status")[:limit]]
    out += [(key, version, "pending") for key, version in pending.values_list("key", "version")[:limit]]
    return out


def _visible_keys(user, keys) -> set[str]:
    return set(ClaimHead.objects.filter(key__in=set(keys)).filter(claim_visible_q(user)).values_list("key", flat=True))


def packets_served(*, run_id, user, limit: int = 20) -> list[PacketServed]:
    """The run's served packets, newest first, each with ``facts``, ``leads`` and ``left_out`` (its
    PacketClaim rows) and ``hidden`` (how many name claims ``user`` may not read). Two reads, three for
    a user who may not read every sensitive claim."""
    packets = list(PacketServed.objects.filter(run_id=str(run_id)).order_by("-at", "-id")[:limit])
    rows = list(PacketClaim.objects.filter(packet__in=packets).order_by("key")) if packets else []
    visible = None if sees_all_sensitive(user) else _visible_keys(user, [r.key for r in rows])
    by_packet: dict = {}
    for row in rows:
        by_packet.setdefault(row.packet_id, []).append(row)
    for packet in packets:
        mine = by_packet.get(packet.id, [])
        shown = [r for r in mine if visible is None or r.key in visible]
        packet.facts = [r for r in shown if r.use == PacketClaim.Use.FACT]
        packet.leads = [r for r in shown if r.use == PacketClaim.Use.LEAD]
        packet.left_out = [r for r in shown if r.use == PacketClaim.Use.LEFT_OUT]
        packet.hidden = len(mine) - len(shown)
    return packets


def claim_served_in(*, key: str, limit: int = 50) -> list[PacketClaim]:
    """The packets that served ``key`` (or left it out), newest first, with the packet (one read)."""
    return list(PacketClaim.objects.filter(key=key).select_related("packet")
                .order_by("-packet__at", "-packet_id")[:limit])


def claim_cited_by(*, key: str, limit: int = 50) -> list[ClaimCitation]:
    """The ledger events whose evidence cited ``key``, newest first (one read)."""
    return list(ClaimCitation.objects.filter(key=key).order_by("-at", "-id")[:limit])
