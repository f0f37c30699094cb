"""``bench ledger --against REV``: the same ledger bench run by an earlier release (a git revision of
this repository, exported to a temporary folder and run with this interpreter), then by this one, on
the same server in the same sitting, and the figures side by side. What a schema change costs (the
partitioning by intent, say) is the ratio of the two: a cost ratio, > 1 when this release is slower."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import tempfile
import threading
from io import BytesIO
from pathlib import Path

from django.db import connection

from ledger.ops.bench import ledger
from ledger.ops.bench.common import BenchError, Out, Report, Row, database_url, verdict

ROOT = Path(__file__).resolve().parents[3]
TARGET_COST = 1.1  # issue 30: the partitioned ledger within 1.1x of the release before, at 1M events
# (figure, label, kind): a rate costs before/now, a latency now/before.
COMPARED = (
    ("plain1_per_s", "append, service layer, plain, 1 client", "rate"),
    ("plainN_per_s", "append, service layer, plain, N clients", "rate"),
    ("svc1_per_s", "append, service layer, stream, 1 client", "rate"),
    ("batchN_per_s", "append batch, service layer, N clients", "rate"),
    ("cp1_per_s", "checkpoint save + load latest, 1 client", "rate"),
    ("decision_big_p50_ms", "recovery decision p50 at 1M events", "latency"),
    ("decision_big_p95_ms", "recovery decision p95 at 1M events", "latency"),
    ("trigger_big_p95_ms", "run_trigger (rolled back) p95 at 1M events", "latency"),
    ("append_big", "append, plain, 1 client, at 1M events", "rate"),
    # no Stateboard code: the same SQL in both runs, so its cost is the machine's drift between them
    ("raw1_per_s", "the machine: raw INSERT + COMMIT, 1 client", "rate"),
)
TARGETED = {"plain1_per_s", "decision_big_p95_ms", "append_big"}

_SCRIPT = """
import json, os, sys
import django
django.setup()
from ledger.ops.bench import ledger
report = ledger.run(out=sys.stderr, **json.loads(os.environ["STATEBOARD_BENCH_ARGS"]))
print(json.dumps({k: v for k, v in report.figures.items() if isinstance(v, (int, float))}))
"""


def _export(rev: str, into: str) -> None:
    try:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", rev],
                                 capture_output=True, check=True, timeout=120).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        detail = getattr(exc, "stderr", b"") or b""
        raise BenchError(f"--against {rev!r}: cannot export that revision with git ({detail.decode()[:200] or exc})")
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")


def _before(rev: str, say: Out, args: dict) -> dict:
    """The earlier release's figures: its own bench, in its own tree, on its own scratch database."""
    with tempfile.TemporaryDirectory(prefix="stateboard-before-") as tree:
        _export(rev, tree)
        env = {**os.environ, "DJANGO_SETTINGS_MODULE": "stateboard.settings", "PYTHONPATH": tree,
               "DATABASE_URL": database_url(connection.settings_dict["NAME"]),  # its bench makes its own database
               "STATEBOARD_BENCH_ARGS": json.dumps(args)}
        say(f"== the release before: {rev} (exported to {tree}) ==")
        process = subprocess.Popen([sys.executable, "-c", _SCRIPT], cwd=tree, env=env, text=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)

        def relay():
            for line in process.stderr:
                say(f"  [before] {line.rstrip()}")

        relaying = threading.Thread(target=relay, daemon=True)
        relaying.start()
        output = process.stdout.read()
        process.wait()
        relaying.join(timeout=5)
    if process.returncode != 0:
        raise BenchError(f"the bench of {rev} failed (exit {process.returncode}); its output is above")
    return json.loads(output.strip().splitlines()[-1])


def run(*, out, against: str, scale: float, skip_http: bool, reps: int, duration: float, clients: int,
        db_name: str, keep: bool = False) -> Report:
    say = Out(out)
    args = dict(scale=scale, skip_http=skip_http, reps=reps, duration=duration, clients=clients,
                db_name=f"{db_name}_before"[:63], keep=keep)
    before = _before(against, say, args)
    say("")
    say("== this release ==")
    now = ledger.run(out=out, scale=scale, skip_http=skip_http, reps=reps, duration=duration, clients=clients,
                     db_name=db_name, keep=keep).figures
    report = compare(before, now, against)
    say("")
    say(f"== this release against {against} (cost = now / before for times, before / now for rates) ==")
    for line in report.table():
        say(line)
    return report


def compare(before: dict, now: dict, against: str) -> Report:
    """The compared figures of both runs as rows, each with its cost ratio and, where targeted, a verdict."""
    report = Report()
    for key, label, kind in COMPARED:
        if not before.get(key) or not now.get(key):
            continue
        cost = before[key] / now[key] if kind == "rate" else now[key] / before[key]
        report.figures[key] = {"before": before[key], "now": now[key], "cost": cost}
        unit = "/s" if kind == "rate" else " ms"
        report.add(Row(label, f"{now[key]:,.2f}{unit}", f"{against}: {before[key]:,.2f}{unit}", f"{cost:.2f}x",
                       f"<= {TARGET_COST:g}x" if key in TARGETED else "(info)",
                       verdict(cost <= TARGET_COST) if key in TARGETED else ""))
    return report
