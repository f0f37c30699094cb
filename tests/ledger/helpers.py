"""Drive runs through the API the way an agent does."""

import itertools
import threading

from django.db import connection
from django.utils import timezone

from tests.factories import client_for, make_agent, make_workflow

_ids = itertools.count(1)
EVIDENCE = [{"uri": "https://example.test/check", "observed_at": "2026-11-29T12:00:00+00:00", "digest": "sha256:1"}]


class AgentDriver:
    def __init__(self, client, workflow_slug: str):
        self.client = client
        self.workflow = workflow_slug

    def trigger(self, inputs=None, expect=(200, 201), **fields):
        body = {"workflow": self.workflow, "inputs": inputs if inputs is not None else {"v": 1}, **fields}
        response = self.client.post("/api/v1/runs/", body, format="json")
        assert response.status_code in (expect if isinstance(expect, tuple) else (expect,)), response.content
        return response.json()

    def event(self, run_id, stage, kind, expect=201, **fields):
        body = {"client_event_id": f"e-{next(_ids)}", "stage": stage, "kind": kind, **fields}
        response = self.client.post(f"/api/v1/runs/{run_id}/events/", body, format="json")
        assert response.status_code == expect, (response.status_code, response.content)
        return response.json()

    def pass_stage(self, run_id, stage, effect_stage=False, verify=True):
        self.event(run_id, stage, "started")
        if effect_stage:
            self.event(run_id, stage, "succeeded",
                       effect={"system": "git", "operation": stage, "reference": f"ref-{stage}-{next(_ids)}"})
            if verify:
                self.event(run_id, stage, "verified", evidence=EVIDENCE)
        else:
            self.event(run_id, stage, "succeeded")

    def fail_stage(self, run_id, stage):
        self.event(run_id, stage, "started")
        self.event(run_id, stage, "failed")

    def escalated_run(self, stage="build", **trigger):
        """With a retry budget of one: a run fails ``stage``, and its re-trigger (the body returned) escalates."""
        self.fail_stage(self.trigger(**trigger)["id"], stage)
        escalated = self.trigger(**trigger)
        assert escalated["state"] == "escalated", escalated
        return escalated

    def lease(self, expect=200, **body):
        """POST /runs/lease/ for this driver's workflow; the leased run's body (or None on 204)."""
        response = self.client.post("/api/v1/runs/lease/", {"workflows": [self.workflow], **body}, format="json")
        assert response.status_code == expect, (response.status_code, response.content)
        return response.json() if response.status_code == 200 else None

    def run(self, run_id):
        return self.client.get(f"/api/v1/runs/{run_id}/").json()


def driven_run(*stages, **trigger):
    """A new agent's driver on a new workflow without approval stages, and a run it triggered
    (``trigger`` holds the trigger's fields) and passed through ``stages``: (driver, run, token)."""
    workflow = make_workflow(approval_stages=[])
    _, token = make_agent()
    driver = AgentDriver(client_for(token), workflow.slug)
    run = driver.trigger(**trigger)
    for stage in stages:
        driver.pass_stage(run["id"], stage)
    return driver, run, token


def race(n, fn):
    """Run fn(i) in n threads released together, each on its own connection; returns their results
    (a value, or the exception fn raised: see ``raised``)."""
    barrier = threading.Barrier(n)
    results = [None] * n

    def worker(i):
        try:
            barrier.wait()
            results[i] = fn(i)
        except Exception as exc:  # collected and asserted by the caller
            results[i] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results


def raised(results) -> list[Exception]:
    """The exceptions among ``race``'s results."""
    return [r for r in results if isinstance(r, Exception)]


def now():
    return timezone.now()
