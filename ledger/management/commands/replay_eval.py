"""``python manage.py replay_eval [--episodes 200] [--seed S]``: recovery accuracy on replay (SPEC §7).

Plays randomized fault-injected episodes through the API (``ledger.replay.episodes``), compares every
decision with the independent reference model (``ledger.replay.reference``), prints the figures,
records them (``ReplayEval``, shown by ``/api/v1/metrics/`` and ``/metrics``) and fails when any effect
ran twice, any completion is unverified, or any decision was wrong.

The episodes' identities, tokens, workflows and runs live in a scratch database of their own
(``ledger.ops.scratch``), where the figures are computed; it is dropped at the end. The configured
database gets only the ``ReplayEval`` row.
"""

import json
import random
import secrets
import time

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from ledger import metrics_selectors
from ledger.models import ReplayEval
from ledger.ops.scratch import scratch_connection
from ledger.replay.episodes import replay


class Command(BaseCommand):
    help = ("Replay randomized fault-injected episodes through the API and compare every recovery decision "
            "with an independent reference model; print the SPEC §7 metrics, record the accuracy, and exit "
            "non-zero on a duplicate effect, an unverified completion or accuracy below 100 %.")

    def add_arguments(self, parser):
        parser.add_argument("--episodes", type=int, default=200, help="number of episodes (default 200)")
        parser.add_argument("--seed", type=int, default=None, help="random seed (default: random, printed)")

    def handle(self, *args, **options):
        episodes = options["episodes"]
        if episodes < 1:
            raise CommandError("--episodes must be at least 1.")
        seed = options["seed"] if options["seed"] is not None else random.SystemRandom().randrange(2**31)
        prefix = f"replay-{seed}-{secrets.token_hex(3)}"  # unique per invocation, even for a repeated seed
        self.stderr.write(f"replay_eval: {episodes} episodes, seed {seed}, workflows {prefix}-*")
        started, began = timezone.now(), time.monotonic()

        def progress(done, tally):
            self.stderr.write(f"  {done}/{episodes} episodes, {tally.decisions} decisions, "
                              f"{tally.correct} right, {len(tally.duplicates)} duplicate effects")

        with scratch_connection("replay", say=self.stderr.write):
            tally = replay(episodes=episodes, seed=seed, prefix=prefix, progress=progress)
            ledger = metrics_selectors.metrics(since=started)
        elapsed = time.monotonic() - began
        record = ReplayEval.objects.create(
            episodes=tally.episodes, decisions=tally.decisions, correct=tally.correct, accuracy=tally.accuracy,
            seed=seed, duplicates=len(tally.duplicates), unverified=tally.unverified)

        rows = [
            ("episodes", tally.episodes),
            ("decisions", tally.decisions),
            ("right decisions", tally.correct),
            ("recovery accuracy", f"{tally.accuracy:.2%}"),
            ("effects performed (keys)", tally.effects),
            ("re-executed after proven absent", tally.reexecuted),
            ("duplicate side effects", len(tally.duplicates)),
            ("duplicate side-effect rate", _rate(len(tally.duplicates), tally.effects)),
            ("completions", tally.completions),
            ("unverified completions", tally.unverified),
            ("unverified completion rate", _rate(tally.unverified, tally.completions)),
            ("episodes stopped by an API error", len(tally.errors)),
            ("seed", seed),
            ("seconds", f"{elapsed:.1f}"),
        ]
        rows += [(f"scratch ledger: {name}", _show(ledger.get(name))) for name in (
            "runs", "effects", "duplicate_side_effect_rate", "unverified_completion_rate",
            "p95_trigger_to_decision_ms", "escalated_runs", "failed_runs", "open_approvals")]
        self._table("replay_eval", rows)
        self._table("decisions checked (outcome / reason_code)",
                    [(f"{outcome} / {reason}", n) for (outcome, reason), n in sorted(tally.reasons.items())])
        self._table("faults injected", sorted(tally.faults.items()))

        failures = []
        if tally.duplicates:
            failures.append(f"{len(tally.duplicates)} effect(s) ran twice: {tally.duplicates[:10]}")
        if tally.unverified:
            failures.append(f"{tally.unverified} completion(s) without verified effects")
        if tally.correct < tally.decisions or tally.errors:
            failures.append(f"accuracy {tally.accuracy:.2%} ({tally.decisions - tally.correct} wrong), "
                            f"{len(tally.errors)} episode(s) stopped by an unexpected API answer")
        if failures:
            for item in tally.mismatches[:20]:
                self.stdout.write(f"\nMISMATCH episode {item['episode']} ({item['workflow']}) at {item['step']}")
                self.stdout.write(f"  expected {json.dumps(item['expected'])}")
                self.stdout.write(f"  actual   {json.dumps(item['actual'])}")
                self.stdout.write("  episode so far:\n    " + "\n    ".join(item["log"]))
            for item in tally.errors[:20]:
                self.stdout.write(f"\nERROR episode {item['episode']} ({item['workflow']}): {item['error']}")
                self.stdout.write("  episode so far:\n    " + "\n    ".join(item["log"]))
            raise CommandError(f"replay_eval failed (seed {seed}, recorded as #{record.pk}): " + "; ".join(failures))
        self.stdout.write(f"\nreplay_eval passed: {tally.correct}/{tally.decisions} decisions right, "
                          f"no effect twice, every completion verified (recorded as #{record.pk}).")

    def _table(self, title: str, rows) -> None:
        width = max((len(str(name)) for name, _ in rows), default=10)
        self.stdout.write(f"\n{title}")
        self.stdout.write("-" * (width + 16))
        for name, value in rows:
            self.stdout.write(f"{str(name):<{width}}  {value}")


def _rate(part: int, whole: int) -> str:
    return f"{part / whole:.2%}" if whole else "n/a"


def _show(value) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
