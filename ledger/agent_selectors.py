"""The fleet (SPEC §15): every agent with its last request, the runs it holds now, its leases and its refused
requests of the last hour, and its token's state — four statements whatever the fleet's size.

- last request: the latest ``ApiToken.last_used_at`` of the agent's tokens, written by the request path at most
  once a minute (``ledger.auth.token_used``), so accurate to ``LAST_USED_PRECISION``;
- runs held: the runs in a holding state whose lease holder is the agent (the identity, not the name);
- leases: the ``leased`` events of the last hour that gave a run to the agent (the ledger records every lease);
- refusals: the audit's refused entries of the last hour whose actor is the agent, by code (the pipeline records
  every refused request of an agent's, ``stateboard.policy.refusal_audit``);
- token: ``active`` while one of its tokens is not revoked (and its user is active: a deactivated one's token
  answers 401 too), else ``revoked``.
"""

from __future__ import annotations

import datetime
from collections import defaultdict
from dataclasses import dataclass, field

from django.db.models import Count, Max, Q
from django.utils import timezone

from ledger.domain.kinds import EventKind
from ledger.models import HOLDING_STATES, Agent, AuditEntry, LedgerEvent, Run

WINDOW = datetime.timedelta(hours=1)


@dataclass
class FleetRow:
    """One agent of the fleet: what ``GET /agents/`` answers and ``/agents/`` shows."""

    name: str
    last_request_at: datetime.datetime | None
    runs_held: list = field(default_factory=list)
    leases_last_hour: int = 0
    refusals_last_hour: dict = field(default_factory=dict)
    token_state: str = "revoked"
    owner: str = ""

    @property
    def token(self) -> dict:
        return {"state": self.token_state}

    @property
    def refusals_total(self) -> int:
        return sum(self.refusals_last_hour.values())


def fleet(now: datetime.datetime | None = None, *, name: str | None = None) -> list[FleetRow]:
    """Every agent (``name``: that one only), by name, with its figures (four statements)."""
    now = now or timezone.now()
    since = now - WINDOW
    named = Agent.objects.filter(user__username=name) if name is not None else Agent.objects.all()
    agents = list(named.values("user_id", "user__username", "user__is_active", "owner__username").annotate(
        last_request_at=Max("user__api_tokens__last_used_at"),
        active_tokens=Count("user__api_tokens", filter=Q(user__api_tokens__revoked_at__isnull=True)),
    ).order_by("user__username"))
    if not agents:
        return []
    ids = [a["user_id"] for a in agents]
    held = defaultdict(list)
    for run_id, holder in (Run.objects.filter(state__in=HOLDING_STATES, lease_holder_id__in=ids)
                           .order_by("created_at").values_list("id", "lease_holder_id")):
        held[holder].append(run_id)
    leases = dict(LedgerEvent.objects.filter(kind=EventKind.LEASED, at__gte=since, data__holder__in=ids)
                  .values("data__holder").annotate(n=Count("id")).order_by().values_list("data__holder", "n"))
    actors = {f"agent:{a['user__username']}": a["user_id"] for a in agents}
    refusals = defaultdict(dict)
    for actor, code, n in (AuditEntry.objects.filter(outcome="refused", at__gte=since, actor__in=list(actors))
                           .values("actor", "code").annotate(n=Count("id")).order_by("actor", "code")
                           .values_list("actor", "code", "n")):
        refusals[actors[actor]][code or "refused"] = n
    return [FleetRow(name=a["user__username"], last_request_at=a["last_request_at"], runs_held=held[a["user_id"]],
                     leases_last_hour=leases.get(a["user_id"], 0), refusals_last_hour=refusals[a["user_id"]],
                     token_state="active" if a["active_tokens"] and a["user__is_active"] else "revoked",
                     owner=a["owner__username"] or "")
            for a in agents]

