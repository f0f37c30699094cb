"""approval: a deploy that needs an editor's approval and is performed by Stateboard's executor.

    python -m stateboard.examples.approval [--version v1]

The agent builds, then proposes the deploy and waits; an editor approves it at /approvals/. Stateboard's
executor then claims the effect key, performs the deploy once and verifies it (here with the built-in
``record`` handler, which calls nothing outside; ``webhook`` would POST to your URL); the run is the
agent's again, which checks and completes it.
"""

import argparse

from stateboard.examples.common import URL, connect, ensure_workflow

WORKFLOW = {"slug": "hello-deploy", "title": "Hello, deployed with approval", "stages": ["build", "deploy", "check"],
            "effect_stages": ["deploy"], "approval_stages": ["deploy"], "lease_seconds": 60,
            "executors": {"deploy": {"handler": "record", "config": {}}}}


def main() -> None:
    parser = argparse.ArgumentParser(description="A deploy approved by an editor, performed by the executor.")
    parser.add_argument("--version", default="v1", help="what to deploy")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds to wait for the decision")
    args = parser.parse_args()
    action = {"system": "k8s", "operation": "deploy", "target": "hello-web",
              "summary": f"Deploy hello-web {args.version} to production"}
    with connect() as sb:
        ensure_workflow(sb, WORKFLOW)
        run = sb.trigger(WORKFLOW["slug"], {"version": args.version})
        print(f"run {run.id}: decided {run.outcome} / {run.decision['reason_code']}", flush=True)
        if run.outcome not in ("fresh", "resume"):
            return print("nothing to do: the decision says so")
        for stage in run.stages_from():
            if stage != "deploy":
                with run.stage(stage):  # started, then succeeded
                    pass
                print(f"  {stage}: done", flush=True)
                continue
            run.event("deploy", "proposed", action=action)  # the executor performs it once approved
            print(f"  deploy: proposed, waiting for an editor: {URL}/approvals/", flush=True)
            run.wait(("checkpointed", "completed", "abandoned", "escalated"), timeout=args.timeout)
            if run.state != "checkpointed":
                return print(f"run {run.id}: {run.state} ({run.decision.get('reason_code') or 'rejected'})")
            effect = sb.effects(run=run.id, status="verified")[0]
            print(f"  deploy: approved, performed by the executor and verified ({effect['reference']})", flush=True)
        print(f"run {run.id}: {run.refresh().state}  ({URL}/runs/{run.id}/)")


if __name__ == "__main__":
    main()
