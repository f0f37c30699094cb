"""The living demo keeps what waits for people bounded: past ``BACKLOG_KEEP`` open requests of a kind
on its workflows, it settles the oldest as colleagues would (``demo-editor`` rejects the request,
``demo-oncall`` abandons the escalated run), each with a reason beginning ``identities.DEMO_TIDYING``, which
the pages mark as the demo's own (not a person's history). The newest stay for you."""

from __future__ import annotations

from django.contrib.auth import get_user_model

from ledger import services
from ledger.identities import DEMO_TIDYING
from ledger.models import Approval, Run
from ledger.ops.demo import WORKFLOWS
from stateboard.errors import DomainError

BACKLOG_KEEP = 5
FLEET_EDITOR, FLEET_ONCALL = "demo-editor", "demo-oncall"


def backlog_tidy(*, keep: int = BACKLOG_KEEP) -> dict[str, int]:
    """Reject the demo's pending requests and abandon its escalated runs beyond the newest ``keep``
    of each; answers how many of each were settled (a race with a person is skipped, not an error)."""
    users = get_user_model().objects
    editor, oncall = users.get(username=FLEET_EDITOR), users.get(username=FLEET_ONCALL)
    reason = (f"{DEMO_TIDYING} the demo keeps at most {keep} of these open and settled this older one itself; "
              "no person decided it.")
    tidied = {"rejected": 0, "abandoned": 0}
    requests = (Approval.objects.filter(status="pending", run__workflow__slug__in=WORKFLOWS)
                .exclude(kind=Approval.Kind.ESCALATION).order_by("-created_at", "-id"))
    for approval_id in list(requests.values_list("id", flat=True)[keep:]):
        try:
            services.approval_decide(approval_id=approval_id, user=editor, approve=False, reason=reason, via="demo")
            tidied["rejected"] += 1
        except DomainError:
            pass
    escalated = Run.objects.filter(state="escalated", workflow__slug__in=WORKFLOWS).order_by("-created_at", "-id")
    for run_id in list(escalated.values_list("id", flat=True)[keep:]):
        try:
            services.run_abandon(run_id=run_id, user=oncall, reason=reason, via="demo")
            tidied["abandoned"] += 1
        except DomainError:
            pass
    return tidied
