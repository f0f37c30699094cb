"""The decision table of SPEC §3, case by case, on the pure function."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger.domain.recovery import (
    CheckpointInfo,
    EffectInfo,
    OtherRun,
    RecoveryInput,
    WorkflowSpec,
    first_not_done,
    recovery_decide,
)

SPEC = WorkflowSpec(("discovery", "assessment", "draft", "build", "commit", "push", "deploy", "verify"),
                    frozenset({"commit", "push", "deploy"}), 3)
FP, POLICY, ENV = "fp-1", "p1", "env-1"


def checkpoint(done=(), *, fp=FP, policy=POLICY, env=ENV, expired=False, statuses=None, asserted=None,
               observed=(), boundary=None, monotonic=True, cp_id=7):
    table = {s: {"status": (statuses or {}).get(s, "succeeded" if s not in SPEC.effect_stages else "verified"),
                 "pointer": f"ledger:r/{i}"} for i, s in enumerate(done, 1)}
    return CheckpointInfo(id=cp_id, run_id="run-old", input_fingerprint=fp, policy_version=policy,
                          env_fingerprint=env, expired=expired, state_table=table, observed_effects=tuple(observed),
                          asserted_stages=frozenset(done if asserted is None else asserted),
                          version_boundary=boundary, monotonic=monotonic)


def decide(**fields):
    latest = fields.get("latest_checkpoint")
    fields.setdefault("latest_checkpoint_same_fingerprint",
                      latest if getattr(latest, "input_fingerprint", None) == FP else None)
    return recovery_decide(RecoveryInput(workflow=SPEC, input_fingerprint=FP, policy_version=POLICY,
                                         env_fingerprint=fields.pop("env", ENV), **fields))


ALL = SPEC.stages
UP_TO_BUILD = ALL[:4]


def test_nothing_found_is_fresh_no_checkpoint():
    d = decide()
    assert (d.outcome, d.reason_code, d.resume_from) == ("fresh", "no_checkpoint", "discovery")


def test_active_run_of_the_intent_is_noop():
    d = decide(other_runs=[OtherRun("r2", "execute", "other-fp", active=True)])
    assert (d.outcome, d.reason_code, d.prior_run) == ("noop", "active_run_exists", "r2")


def test_escalation_of_same_fingerprint_is_pending_not_a_second_escalation():
    d = decide(other_runs=[OtherRun("r2", "escalated", FP, active=False)],
               latest_checkpoint=checkpoint(UP_TO_BUILD), failed_runs_since_progress=3)
    assert (d.outcome, d.reason_code) == ("noop", "escalation_pending")


def test_escalation_of_another_fingerprint_does_not_block_a_new_one():
    d = decide(other_runs=[OtherRun("r2", "escalated", "old-fp", active=False)])
    assert (d.outcome, d.reason_code) == ("fresh", "no_checkpoint")


def test_every_stage_done_with_verified_effect_is_noop():
    cp = checkpoint(ALL)
    d = decide(latest_checkpoint=cp, effects=[EffectInfo("k", "deploy", "verified", "run-old")])
    assert (d.outcome, d.reason_code) == ("noop", "verified_effect_same_fingerprint")


def test_every_stage_done_without_effects_is_completed_same_fingerprint():
    spec = WorkflowSpec(("a", "b"), frozenset(), 3)
    cp = CheckpointInfo(1, "r", FP, POLICY, ENV, False, {"a": {"status": "succeeded"}, "b": {"status": "skipped"}},
                        asserted_stages=frozenset({"a", "b"}))
    d = recovery_decide(RecoveryInput(spec, FP, POLICY, ENV, latest_checkpoint=cp, latest_checkpoint_same_fingerprint=cp))
    assert (d.outcome, d.reason_code) == ("noop", "completed_same_fingerprint")


def test_completion_counts_even_when_the_checkpoint_expired():
    d = decide(latest_checkpoint=checkpoint(ALL, expired=True),
               effects=[EffectInfo("k", "deploy", "verified")])
    assert d.outcome == "noop"


@pytest.mark.parametrize("status", ["attempted", "effective", "unknown"])
def test_unverified_effect_is_verify_only_and_lists_it(status):
    cp = checkpoint(UP_TO_BUILD + ("commit", "push"), statuses={"deploy": "succeeded"})
    d = decide(latest_checkpoint=cp, effects=[EffectInfo("k-commit", "commit", "verified"),
                                              EffectInfo("k-push", "push", "verified"),
                                              EffectInfo("k-deploy", "deploy", status, "run-old")])
    assert (d.outcome, d.reason_code) == ("verify_only", "effect_unverified")
    assert d.verify_effects == ("k-deploy",)
    assert d.resume_from == "verify"


def test_verify_only_with_expired_checkpoint_keeps_only_verified_effects():
    cp = checkpoint(UP_TO_BUILD + ("commit",), expired=True)
    d = decide(latest_checkpoint=cp, effects=[EffectInfo("k-commit", "commit", "verified"),
                                              EffectInfo("k-push", "push", "unknown")])
    assert d.outcome == "verify_only"
    assert d.resume_from == "discovery"  # the expired checkpoint's non-effect stages do not count


def test_expired_checkpoint_is_fresh():
    d = decide(latest_checkpoint=checkpoint(UP_TO_BUILD, expired=True))
    assert (d.outcome, d.reason_code, d.resume_from) == ("fresh", "checkpoint_expired", "discovery")


def test_policy_change_is_fresh():
    d = decide(latest_checkpoint=checkpoint(UP_TO_BUILD, policy="p0", fp="fp-0"))
    assert (d.outcome, d.reason_code) == ("fresh", "policy_changed")


def test_input_change_is_fresh():
    d = decide(latest_checkpoint=checkpoint(UP_TO_BUILD, fp="fp-0"))
    assert (d.outcome, d.reason_code) == ("fresh", "input_changed")


@pytest.mark.parametrize("fields,name", [
    ({"asserted": ("discovery",)}, "unasserted_stages"),
    ({"observed": ("missing-key",)}, "unknown_observed_effects"),
    ({"boundary": 99}, "version_boundary_ahead_of_store"),
    ({"monotonic": False}, "checkpoints_not_monotonic"),
])
def test_failed_recovery_assertion_escalates_and_names_it(fields, name):
    d = decide(latest_checkpoint=checkpoint(UP_TO_BUILD, **fields), store_version=5)
    assert (d.outcome, d.reason_code) == ("escalated", "checkpoint_inconsistent")
    assert any(a.startswith(name) for a in d.failed_assertions)


def test_observed_effect_that_exists_passes_the_assertion():
    d = decide(latest_checkpoint=checkpoint(UP_TO_BUILD, observed=("k1",)), existing_effect_keys=frozenset({"k1"}))
    assert d.outcome == "resume"


def test_retry_budget_exhausted_escalates():
    d = decide(latest_checkpoint=checkpoint(UP_TO_BUILD[:3]), failed_runs_since_progress=3)
    assert (d.outcome, d.reason_code) == ("escalated", "retry_budget_exhausted")


def test_retries_left_resume_from_the_failed_stage():
    d = decide(latest_checkpoint=checkpoint(UP_TO_BUILD[:3]), failed_runs_since_progress=2)
    assert (d.outcome, d.reason_code, d.resume_from) == ("resume", "resume_incomplete_stage", "build")


def test_env_change_downgrades_stages_after_the_last_verified_effect():
    cp = checkpoint(UP_TO_BUILD + ("commit",))
    d = decide(latest_checkpoint=cp, env="env-2", effects=[EffectInfo("k-commit", "commit", "verified")])
    assert (d.outcome, d.reason_code) == ("resume", "resume_incomplete_stage")  # nothing done after commit
    cp = checkpoint(UP_TO_BUILD)
    d = decide(latest_checkpoint=cp, env="env-2")
    assert (d.outcome, d.reason_code, d.resume_from) == ("resume", "env_changed_downgraded", "discovery")
    assert set(d.reset_stages) == set(UP_TO_BUILD)


def test_env_change_keeps_verified_effects_and_resets_later_non_effect_stages():
    spec = WorkflowSpec(("a", "pub", "b", "c", "pub2"), frozenset({"pub", "pub2"}), 3)
    table = {"a": {"status": "succeeded"}, "pub": {"status": "verified"}, "b": {"status": "succeeded"}}
    cp = CheckpointInfo(1, "r", FP, POLICY, ENV, False, table, asserted_stages=frozenset(table))
    d = recovery_decide(RecoveryInput(spec, FP, POLICY, "env-2", latest_checkpoint=cp,
                                      latest_checkpoint_same_fingerprint=cp,
                                      effects=[EffectInfo("k", "pub", "verified")]))
    assert (d.outcome, d.reason_code, d.resume_from, d.reset_stages) == ("resume", "env_changed_downgraded", "b", ("b",))
    assert d.stage_status == {"a": "succeeded", "pub": "verified"}


def test_failing_first_stage_escalates_once_budget_is_spent_even_without_checkpoint():
    d = decide(failed_runs_since_progress=3)
    assert (d.outcome, d.reason_code) == ("escalated", "retry_budget_exhausted")


@given(st.lists(st.sampled_from(["succeeded", "skipped", "verified", "failed", "started", None]),
                min_size=len(SPEC.stages), max_size=len(SPEC.stages)))
def test_resume_from_is_always_the_first_stage_not_done(statuses):
    """resume_from is the first stage in order that is not succeeded/skipped (verified for effect stages)."""
    status = {s: v for s, v in zip(SPEC.stages, statuses) if v}
    expected = next((s for s in SPEC.stages
                     if not (status.get(s) in ("skipped", "verified")
                             or (status.get(s) == "succeeded" and s not in SPEC.effect_stages))), None)
    assert first_not_done(SPEC, status) == expected


# ---------------------------------------------------------------- SPEC §16: the day budget, right after rule 1

OTHERS = st.lists(st.builds(OtherRun, id=st.sampled_from(["r1", "r2"]),
                            state=st.sampled_from(["execute", "escalated", "failed", "completed"]),
                            input_fingerprint=st.sampled_from([FP, "fp-2"]), active=st.booleans()), max_size=3)


@given(others=OTHERS, stands=st.booleans(), failed=st.integers(0, 5), done=st.sampled_from([(), UP_TO_BUILD, ALL]),
       effects=st.lists(st.builds(EffectInfo, key=st.sampled_from(["k1", "k2"]), stage=st.sampled_from(["push", "deploy"]),
                                  status=st.sampled_from(["attempted", "verified", "unknown", "failed"])), max_size=2))
def test_a_spent_day_decides_every_trigger_rule_1_leaves_escalated_once_then_noop(others, stands, failed, done,
                                                                                 effects):
    """Whatever the intent holds, a trigger on a spent day is rule 1's decision where rule 1 applies, else
    ``budget_exhausted``: escalated while no escalation stands for the day, noop once one does; on a day not
    spent the decision is the one without the budget."""
    fields = dict(other_runs=others, failed_runs_since_progress=failed, effects=effects,
                  latest_checkpoint=checkpoint(done) if done else None)
    unspent = decide(**fields)
    assert decide(**fields, day_escalation_stands=stands) == unspent
    spent = decide(**fields, day_budget_spent=True, day_escalation_stands=stands)
    if unspent.reason_code in ("active_run_exists", "escalation_pending"):
        assert spent == unspent
    else:
        assert (spent.outcome, spent.reason_code) == ("noop" if stands else "escalated", "budget_exhausted")
        assert spent.verify_effects == () and spent.resume_from is None


def test_a_staged_run_is_never_held_by_the_day_budget():
    d = recovery_decide(RecoveryInput(workflow=SPEC, input_fingerprint=FP, policy_version=POLICY, env_fingerprint=ENV,
                                      reopened="staged", day_budget_spent=True))
    assert (d.outcome, d.reason_code) == ("fresh", "staged")
