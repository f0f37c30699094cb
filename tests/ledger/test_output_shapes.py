"""The hot paths build their answers directly (``ledger.api.shapes.run_body`` / ``event_body``); they must equal
what DRF's ModelSerializer makes of the declared fields, for runs in every shape an answer can take."""

import json
from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework import serializers

from ledger import services
from ledger.api.shapes import EventOutputSerializer, RunOutputSerializer, event_body, run_body
from ledger.models import LedgerEvent, Run
from tests.factories import make_workflow

pytestmark = pytest.mark.django_db


def _drf_run(run: Run) -> dict:
    """DRF's generic ModelSerializer output for RunOutputSerializer's fields, plus the queued flag."""
    body = serializers.ModelSerializer.to_representation(RunOutputSerializer(), run)
    body["queued"] = run.queued_until is not None and not run.is_terminal
    if body["queued"]:
        body["queued_until"] = serializers.DateTimeField().to_representation(run.queued_until)
    return body


def _same(a: dict, b: dict) -> None:
    assert json.loads(json.dumps(a, default=str)) == json.loads(json.dumps(b, default=str))
    assert list(a) == list(b)  # the same keys in the same order


def _runs():
    wf = make_workflow(stages=["build", "deploy"], effect_stages=["deploy"], lease_seconds=60)
    fresh, _ = services.run_trigger(workflow_slug=wf.slug, inputs={"n": 1, "nested": {"a": [1, 2]}},
                                    intent="shapes/fresh", actor="agent:shapes", trigger_key="k-1",
                                    env_fingerprint="img:1")
    leased = Run.objects.get(id=fresh.id)
    queued, _ = services.run_trigger(workflow_slug=wf.slug, inputs={}, intent="shapes/queued", actor="system")
    Run.objects.filter(id=queued.id).update(queued_until=timezone.now() + timedelta(minutes=5), lease_owner="")
    staged, _ = services.run_trigger(workflow_slug=wf.slug, inputs={"s": True}, intent="shapes/staged",
                                     actor="agent:shapes", staged=True)
    ended, _ = services.run_trigger(workflow_slug=wf.slug, inputs={"e": 1}, intent="shapes/ended", actor="agent:shapes")
    services.event_append(run_id=ended.id, body={"stage": "build", "kind": "started"}, actor="agent:shapes")
    services.event_append(run_id=ended.id, body={"stage": "build", "kind": "failed", "reason_code": "boom"},
                          actor="agent:shapes")
    return [Run.objects.select_related("workflow").get(id=r.id) for r in (leased, queued, staged, ended)]


def test_run_body_equals_the_model_serializer_for_every_shape():
    runs = _runs()
    assert {r.state for r in runs} >= {"fresh", "failed"}
    assert any(r.lease_owner for r in runs) and any(r.queued_until for r in runs)
    for run in runs:
        _same(run_body(run), _drf_run(run))
        _same(RunOutputSerializer(run).data, _drf_run(run))
    assert run_body(runs[0], duplicate=True)["duplicate"] is True


def test_event_body_equals_the_model_serializer():
    run = _runs()[-1]
    events = list(LedgerEvent.objects.filter(run=run).order_by("seq"))
    assert len(events) >= 3
    for event in events:
        _same(event_body(event), serializers.ModelSerializer.to_representation(EventOutputSerializer(), event))
