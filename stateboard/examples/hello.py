"""hello: one run with stateboard.client: trigger, stages, an effect, verify.

    python -m stateboard.examples.hello              # decided fresh: every stage, the publish verified
    python -m stateboard.examples.hello              # again: decided noop, nothing is performed twice
    python -m stateboard.examples.hello --source v2  # new inputs: decided fresh / input_changed
"""

import argparse

from stateboard.client import Run
from stateboard.examples.common import connect, ensure_workflow, evidence

WORKFLOW = {"slug": "hello", "title": "Hello", "stages": ["fetch", "draft", "publish", "check"],
            "effect_stages": ["publish"], "approval_stages": [], "lease_seconds": 60}


def serve(run: Run) -> None:
    """Do what the run's decision says, never more."""
    print(f"run {run.id}: decided {run.outcome} / {run.decision['reason_code']}", flush=True)
    if run.outcome not in ("fresh", "resume", "verify_only"):
        print("nothing to do: the decision says so (the work is done and verified, or another run holds it)")
        return
    post = f"https://blog.example/{run.intent}/{run.raw['input_fingerprint'][:12]}"  # one post per input
    for effect in run.effects_to_verify():  # verify_only: check what may have happened, never redo it
        run.verify(effect["stage"], evidence(post))
        print(f"  {effect['stage']}: verified, not repeated")
    for stage in run.stages_from():
        with run.stage(stage) as st:  # posts started, then succeeded (failed / unknown on an exception)
            if run.is_effect_stage(stage):
                st.effect = {"system": "blog", "operation": "publish", "reference": post}  # ...after publishing
        print(f"  {stage}: done" + (f", effect {post}" if st.effect else ""))
        if run.is_effect_stage(stage):
            run.verify(stage, evidence(post))  # looked at the world: the post is there
            print(f"  {stage}: verified")
    print(f"run {run.id}: {run.refresh().state}  ({run.client.base_url}/runs/{run.id}/)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description="One run: trigger, stages, an effect, verify.")
    parser.add_argument("--source", default="v1", help="the input version (a new one is a new fingerprint)")
    source = parser.parse_args().source
    with connect() as sb:
        ensure_workflow(sb, WORKFLOW)
        serve(sb.trigger("hello", {"source": source}))


if __name__ == "__main__":
    main()
