"""The alert evaluator at 100 rules (SPEC §14; ``bench pages`` runs it over the history it loaded).

Each of the loaded workflows gets one rule of each of the five kinds (20 workflows: 100 rules), then beat's
pass (``services.alerts_evaluate``) runs once to open what holds and ``samples`` times more as beat runs it
each minute: the time of a pass and its statements, which must end well within the minute.
"""

from __future__ import annotations

import time

from django.db import connection
from django.test.utils import CaptureQueriesContext

from ledger import services
from ledger.domain.alerts import KINDS
from ledger.models import Alert, Workflow
from ledger.ops.bench.common import percentile

TARGET_PASS_SECONDS = 10.0  # a pass every minute: it must end well within it
RULES = {  # thresholds the loaded history meets, so the first pass opens alerts (and their deliveries)
    "absence": {"cron": "* * * * *", "within_minutes": 1},
    "failure_rate": {"window_minutes": 525_600, "threshold": 0.01, "min_runs": 1},
    "escalation_age": {"minutes": 1},
    "approval_age": {"minutes": 1},
    "queue_age": {"minutes": 1},
}
assert set(RULES) == set(KINDS)


def rules_load(workflows: list[Workflow]) -> int:
    """One rule of each kind on each workflow (written as a definition holds them); how many rules."""
    for workflow in workflows:
        workflow.alerts = [{"name": f"bench-{kind.replace('_', '-')}", "kind": kind, "severity": "ticket",
                            "notify": ["inapp"], **parameters} for kind, parameters in RULES.items()]
        Workflow.objects.filter(id=workflow.id).update(alerts=workflow.alerts)
    return len(workflows) * len(RULES)


def evaluate(say, samples: int) -> dict:
    """The first pass (it opens what holds), then ``samples`` passes: p50 / p95 seconds and statements."""
    started = time.perf_counter()
    first = services.alerts_evaluate()
    first_seconds = time.perf_counter() - started
    seconds, statements = [], 0
    for _ in range(samples):
        with CaptureQueriesContext(connection) as queries:
            started = time.perf_counter()
            services.alerts_evaluate()
            seconds.append(time.perf_counter() - started)
        statements = len(queries)
    figures = {"first_seconds": first_seconds, "opened": first["opened"], "p50": percentile(seconds, 0.5),
               "p95": percentile(seconds, 0.95), "statements": statements,
               "open_alerts": Alert.objects.filter(state__in=("firing", "acknowledged")).count()}
    say(f"  alert evaluation: first pass {first_seconds:.2f} s ({first['opened']} opened), then p50 "
        f"{figures['p50']:.2f} s / p95 {figures['p95']:.2f} s, {statements} statements a pass")
    return figures
