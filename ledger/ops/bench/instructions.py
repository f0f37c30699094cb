"""CPU instructions per operation in the client process, counted by valgrind's callgrind: a figure that
does not move with the machine's load (the same code gives the same count to within about half a per cent, where
throughput on a shared two-core machine drifts by a third within an hour).

One child process under callgrind, against the scratch database: a raw psycopg INSERT + COMMIT (the
baseline), an append through the service layer, the same append through the HTTP stack in-process
(Django's WSGI handler, the middleware, DRF and the policy pipeline with the token check: everything a web worker runs for it, without
the server's socket work), a batch of ``agentpath.BATCH_SIZE`` events through the service layer, and a new
trigger through the service layer (one of ``agentpath.INTENTS`` intents of one workflow in turn, as
``bench ledger`` triggers them, so each intent's history grows). Each loop is counted on its own (``callgrind_control`` zeroes the counters
before it and dumps them after). The database server's own work is not counted: the throughput figures
of ``bench ledger`` measure that.
"""

from __future__ import annotations

import gc
import io
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import django
from django.conf import settings

from ledger.ops.bench.agentpath import BATCH_SIZE, INTENTS, INTENTS_WORKFLOW, intents_workflow
from ledger.ops.bench.appends import STREAM_STAGES, _service_trigger, plain_body, stream_workflow
from ledger.ops.bench.common import BenchError, Out, _RawWriter, database_url, raw_table
from stateboard.roles import actor_for

LOOPS = ("raw", "service", "http", "batch", "trigger")
WARMUP = 50


def run(*, out, db_name: str, ops: int = 300) -> dict:
    """Count the three loops (``ops`` operations each) and print instructions per operation."""
    from ledger import services  # (d) the `-m` child imports this pre-setup
    from ledger.identities import agent_create  # (d)

    say = Out(out)
    valgrind, control = shutil.which("valgrind"), shutil.which("callgrind_control")
    if not valgrind or not control:
        raise BenchError("The instruction count needs valgrind (with callgrind_control) on PATH: "
                         "apt-get install valgrind.")
    stream_workflow()
    intents_workflow()
    agent, token = agent_create(name=f"bench-instr-{uuid.uuid4().hex[:6]}")
    actor = actor_for(agent.user)
    runs = {}
    for loop in ("service", "http", "batch"):
        runs[loop] = str(_service_trigger(actor))
        services.event_append(run_id=runs[loop], body={"stage": STREAM_STAGES[0], "kind": "started"}, actor=actor)
    with tempfile.TemporaryDirectory(prefix="stateboard-callgrind-") as tmp:
        spec = Path(tmp) / "spec.json"
        spec.write_text(json.dumps({"ops": ops, "actor": actor, "token": token, "runs": runs,
                                    "control": control}))
        env = dict(os.environ, DATABASE_URL=database_url(db_name), DJANGO_SETTINGS_MODULE="stateboard.settings",
                   DEBUG="0", ALLOWED_HOSTS="127.0.0.1", PYTHONHASHSEED="0", LOG_LEVEL="WARNING",
                   SECRET_KEY=os.environ.get("SECRET_KEY") or "bench-instructions")
        say(f"callgrind: {len(LOOPS)} loops of {ops} operations each in one process (about two minutes) ...")
        started = time.perf_counter()
        result = subprocess.run(
            [valgrind, "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={tmp}/cg.out", sys.executable, "-m",
             "ledger.ops.bench.instructions", str(spec)],
            cwd=settings.BASE_DIR, env=env, capture_output=True, text=True, timeout=1800)
        if result.returncode != 0:
            raise BenchError(f"the callgrind run failed ({result.returncode}):\n{result.stderr[-3000:]}")
        counts = _dumped_counts(Path(tmp))
    missing = [loop for loop in LOOPS if loop not in counts]
    if missing:
        raise BenchError(f"callgrind wrote no counts for {missing}; its output:\n{result.stderr[-2000:]}")
    per_op = {loop: counts[loop] / ops for loop in LOOPS}
    say(f"  ({time.perf_counter() - started:.0f} s)")
    say("  client-process instructions per operation (the database server's work not counted):")
    for loop, label in (("raw", "raw psycopg INSERT + COMMIT"), ("service", "append, service layer, plain"),
                        ("http", "append, HTTP stack in-process, plain"),
                        ("batch", f"append batch of {BATCH_SIZE}, service layer"),
                        ("trigger", "new trigger, service layer")):
        say(f"    {label:40s} {per_op[loop]:>12,.0f}   raw / this {per_op['raw'] / per_op[loop]:.3f}x")
    return per_op


def _dumped_counts(folder: Path) -> dict:
    """{loop: instructions} from the dumps the child asked for (``callgrind_control -d <loop>``)."""
    counts = {}
    for path in folder.glob("cg.out*"):
        text = path.read_text(errors="replace")
        trigger = re.search(r"^desc: Trigger: dump (\w+)", text, re.M)  # callgrind_control -d <loop>
        total = re.search(r"^(?:summary|totals): (\d+)", text, re.M)
        if trigger and total:
            counts[trigger.group(1)] = int(total.group(1))
    return counts


# ---------------------------------------------------------------- the child, under callgrind

def _wsgi_post(application, path: str, token: str, body: dict) -> tuple[str, bytes]:
    data = json.dumps(body).encode()
    environ = {"REQUEST_METHOD": "POST", "PATH_INFO": path, "QUERY_STRING": "", "SERVER_NAME": "127.0.0.1",
               "SERVER_PORT": "8000", "HTTP_HOST": "127.0.0.1", "wsgi.url_scheme": "http",
               "SERVER_PROTOCOL": "HTTP/1.1", "wsgi.input": io.BytesIO(data), "CONTENT_LENGTH": str(len(data)),
               "CONTENT_TYPE": "application/json", "HTTP_AUTHORIZATION": f"Token {token}",
               "REMOTE_ADDR": "127.0.0.1", "wsgi.errors": sys.stderr}
    answer = {}
    response = application(environ, lambda status, headers, exc_info=None: answer.update(status=status))
    content = b"".join(response)
    response.close()
    return answer["status"], content


def _child(spec_path: str) -> None:
    django.setup()
    from stateboard.wsgi import application  # (d) after django.setup() in the `-m` child

    spec = json.loads(Path(spec_path).read_text())
    ops, actor, token, runs, control = spec["ops"], spec["actor"], spec["token"], spec["runs"], spec["control"]
    with raw_table() as table:  # the same INSERT + COMMIT as bench ledger's raw baseline
        raw = _RawWriter(table, autocommit=False)
        try:
            _count_loops(control, raw.insert, runs, actor, token, application, ops)
        finally:
            raw.conn.close()


def _count_loops(control: str, raw_insert, runs: dict, actor: str, token: str, application, ops: int) -> None:
    from ledger import services  # (d) the `-m` child imports this pre-setup

    def service_append():
        services.event_append(run_id=runs["service"], body=plain_body(STREAM_STAGES[0]), actor=actor)

    path = f"/api/v1/runs/{runs['http']}/events/"

    def http_append():
        status, content = _wsgi_post(application, path, token, plain_body(STREAM_STAGES[0]))
        if not status.startswith("201"):
            raise SystemExit(f"the HTTP append answered {status}: {content[:300]!r}")

    def batch_append():
        services.events_append(run_id=runs["batch"], bodies=[plain_body(STREAM_STAGES[0]) for _ in range(BATCH_SIZE)],
                               actor=actor)

    triggered = itertools.count()
    tag = uuid.uuid4().hex[:6]

    def new_trigger():
        services.run_trigger(workflow_slug=INTENTS_WORKFLOW, inputs={"n": 1},
                             intent=f"{tag}-{next(triggered) % INTENTS}", actor=actor)

    pid = str(os.getpid())
    for loop, step in (("raw", raw_insert), ("service", service_append), ("http", http_append),
                       ("batch", batch_append), ("trigger", new_trigger)):
        for _ in range(min(WARMUP, ops)):  # (a smoke test's few operations warm up as few)
            step()
        # A full collection walks every object the process holds (tens of millions of instructions, at
        # moments no loop chooses): collected here and the survivors frozen, a loop counts its own work.
        gc.collect()
        gc.freeze()
        subprocess.run([control, "-i", "on", pid], check=True, capture_output=True)  # (start-up runs uncounted)
        subprocess.run([control, "-z", pid], check=True, capture_output=True)
        for _ in range(ops):
            step()
        subprocess.run([control, "-d", loop, pid], check=True, capture_output=True)
        subprocess.run([control, "-i", "off", pid], check=True, capture_output=True)


if __name__ == "__main__":
    _child(sys.argv[1])
