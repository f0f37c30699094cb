"""An agent's own idempotency key is namespaced by its run's workflow and intent before it is stored: no intent
can take another's key, a key is still claimed once within its intent, and keys stored before keep working."""

import pytest
from django.utils import timezone

from ledger.domain.effects import effect_key_namespaced
from ledger.models import Effect, EffectKey
from ledger.services import effect_key_default
from tests.factories import client_for, make_agent, make_workflow
from tests.ledger.helpers import EVIDENCE, AgentDriver

pytestmark = pytest.mark.django_db
STAGES = ["push", "deploy"]


def _agents(wf, n=2):
    return [AgentDriver(client_for(make_agent()[1]), wf.slug) for _ in range(n)]


def test_another_agent_cannot_squat_a_runs_default_effect_key():
    """B reads A's run, computes its default key and claims it first from a run of its own: A still starts."""
    wf = make_workflow(stages=STAGES, effect_stages=STAGES, approval_stages=[])
    a, b = _agents(wf)
    run_a, run_b = a.trigger(intent="alpha"), b.trigger(intent="beta")
    seen = b.run(run_a["id"])  # any identity may read a run
    a_key = effect_key_default(workflow_slug=wf.slug, intent=seen["intent"], fingerprint=seen["input_fingerprint"],
                               stage="push")

    squat = b.event(run_b["id"], "push", "started", idempotency_key=a_key)
    b_key = effect_key_namespaced(workflow_slug=wf.slug, intent="beta", key=a_key)
    assert squat["idempotency_key"] == b_key != a_key
    started = a.event(run_a["id"], "push", "started")  # not effect_exists
    assert started["idempotency_key"] == a_key
    assert str(Effect.objects.get(idempotency_key=a_key).run_id) == started["run"] == run_a["id"]

    # B's own key still answers as before inside its intent: the agent's key, or the stored one, moves its
    # effect, and a second start with either is effect_exists (nothing executed twice).
    b.event(run_b["id"], "push", "succeeded", idempotency_key=a_key,
            effect={"system": "git", "operation": "push", "reference": "b1"})
    b.event(run_b["id"], "push", "verified", idempotency_key=b_key, evidence=EVIDENCE)
    assert Effect.objects.get(idempotency_key=b_key).status == "verified"
    for key in (a_key, b_key):
        refused = b.event(run_b["id"], "deploy", "started", idempotency_key=key, expect=409)
        assert refused["code"] == "effect_exists" and refused["effect"]["idempotency_key"] == b_key
    assert Effect.objects.filter(intent="beta").count() == 1


def test_the_same_key_from_two_intents_is_two_effects_and_each_is_unique_across_the_install():
    wf = make_workflow(stages=["deploy"], effect_stages=["deploy"], approval_stages=[])
    (a,) = _agents(wf, 1)
    alpha, beta = a.trigger(intent="alpha"), a.trigger(intent="beta")
    keys = {a.event(run["id"], "deploy", "started", idempotency_key="deploy-prod-42")["idempotency_key"]
            for run in (alpha, beta)}
    assert keys == {effect_key_namespaced(workflow_slug=wf.slug, intent=i, key="deploy-prod-42")
                    for i in ("alpha", "beta")}
    assert EffectKey.objects.filter(idempotency_key__in=keys).count() == 2
    assert not Effect.objects.filter(idempotency_key="deploy-prod-42").exists()


def test_a_key_stored_before_namespacing_keeps_its_effect():
    """A key the intent holds already (stored raw by an older release) is used as it is: never claimed afresh."""
    wf = make_workflow(stages=STAGES, effect_stages=STAGES, approval_stages=[])
    (a,) = _agents(wf, 1)
    run = a.trigger(intent="alpha")
    now = timezone.now()
    EffectKey.objects.create(idempotency_key="legacy-push-7", intent="alpha")
    Effect.objects.create(idempotency_key="legacy-push-7", workflow=wf, intent="alpha", stage="push", run_id=run["id"],
                          input_fingerprint=run["input_fingerprint"], status="unknown", claimed_seq=1, last_seq=1,
                          created_at=now, updated_at=now)
    refused = a.event(run["id"], "push", "started", idempotency_key="legacy-push-7", expect=409)
    assert refused["code"] == "effect_exists" and refused["effect"]["idempotency_key"] == "legacy-push-7"
    assert Effect.objects.filter(intent="alpha").count() == 1
