"""scheduled: an agent that serves its workflow's scheduled runs (a tick every five minutes under ``up``).

    python -m stateboard.examples.scheduled               # serve runs as they are queued, until Ctrl-C
    python -m stateboard.examples.scheduled --max-runs 1  # serve one run, then exit (also: --once)

Each tick queues a run (inputs ``{"source": "v1", "slot": T}``); ``lease`` long-polls for it and hands it
to one agent only, however many serve the workflow. The run is served by hello's loop.
"""

import argparse

from stateboard.examples.common import connect, ensure_workflow
from stateboard.examples.hello import WORKFLOW as HELLO
from stateboard.examples.hello import serve

WORKFLOW = {**HELLO, "slug": "hello-scheduled", "title": "Hello, every five minutes",
            "schedule": "*/5 * * * *", "schedule_inputs": {"source": "v1"}}


def main() -> None:
    parser = argparse.ArgumentParser(description="Serve the scheduled runs of hello-scheduled.")
    parser.add_argument("--max-runs", type=int, default=0, help="exit after serving this many (0: never)")
    parser.add_argument("--once", action="store_true", help="the same as --max-runs 1")
    args = parser.parse_args()
    max_runs = 1 if args.once else args.max_runs
    with connect() as sb:
        ensure_workflow(sb, WORKFLOW)
        print(f"waiting for runs of {WORKFLOW['slug']} (schedule {WORKFLOW['schedule']!r}, UTC)", flush=True)
        served = 0
        try:
            while not max_runs or served < max_runs:
                run = sb.lease([WORKFLOW["slug"]], wait_seconds=30)  # answers as soon as a run is queued
                if run is not None:
                    print(f"leased run {run.id} (tick {run.raw['inputs'].get('slot')})", flush=True)
                    serve(run)
                    served += 1
        except KeyboardInterrupt:
            pass
        print(f"served {served} run(s)")


if __name__ == "__main__":
    main()
