"""`manage.py demo`: a simulated agent fleet against the running server, with the field's faults."""

import os
import random
import signal
import time
import urllib.error
import urllib.request
from datetime import datetime, timezone

from django.core.management.base import BaseCommand, CommandError

from ledger.management.commands.up import stop_on_sigterm
from ledger.models import Workflow
from ledger.ops.demo import WORKFLOWS
from ledger.ops.demo.backlog import BACKLOG_KEEP, backlog_tidy
from ledger.ops.demo.fleet import Fleet, round_tag, summarize
from ledger.ops.demo.scenarios import SCENARIOS
from ledger.ops.demo.setup import demo_setup

LIVING_SCENARIOS_PER_ROUND = 3
LEASE_WAIT_SECONDS = 10  # idle agents long-poll this long per lease call (SPEC §11.3: no thread held)



class Command(BaseCommand):
    help = ("A simulated fleet of agents driving runs over HTTP with stateboard.client: duplicate triggers, "
            "a deploy timeout, failed checks, changed sources, escalations, stale claims, approvals.")

    def add_arguments(self, parser):
        parser.add_argument("--url", default=os.environ.get("STATEBOARD_URL") or "http://127.0.0.1:8000",
                            help="the server's root URL (default STATEBOARD_URL, else http://127.0.0.1:8000)")
        parser.add_argument("--agents", type=int, default=3, help="agent processes (identities demo-agent-1..N)")
        parser.add_argument("--once", action="store_true",
                            help="one pass through every scenario, a summary and a check, then exit")
        parser.add_argument("--pause", type=float, default=45.0, help="seconds between rounds of the living fleet")

    def handle(self, *args, url, agents, once, pause, **options):
        if agents < 1:
            raise CommandError("--agents must be at least 1.")
        url = url.rstrip("/")
        self._wait_for(url)
        world = demo_setup(agents=agents)
        self.stdout.write(self.style.SUCCESS(
            f"Demo ready at {url}/ — sign in as {', '.join(world['users'])} with password {world['password']!r}."))
        self.stdout.write(f"Agents: {', '.join(world['agents'])}; workflows: {', '.join(WORKFLOWS)}.")
        first = next(iter(world["agents"]))  # to try the API by hand (a fresh token on every start)
        self.stdout.write(f"Agent {first!r} API token: {world['agents'][first]}")
        executors = {w.slug: sorted(w.executors or {}) for w in Workflow.objects.filter(slug__in=WORKFLOWS)}
        fleet = Fleet(url=url, agents=world["agents"], editor_token=world["tokens"]["demo-editor"], executors=executors,
                      pace=0.0 if once else 1.5, lease_wait=0.0 if once else LEASE_WAIT_SECONDS,
                      out=self.stdout.write)
        signal.signal(signal.SIGTERM, stop_on_sigterm)
        fleet.start()
        try:
            if once:
                self._once(fleet, SCENARIOS, round_tag(), summarize)
            else:
                self._living(fleet, SCENARIOS, round_tag, pause, agents)
        except KeyboardInterrupt:
            self.stdout.write("Demo fleet stopping…")
        finally:
            fleet.stop()

    def _once(self, fleet, scenarios, tag, summarize):
        since = datetime.now(timezone.utc)
        self.stdout.write(f"One pass, intents tagged {tag}:")
        records = fleet.play(list(scenarios), tag, executor_fallback=True)
        lines, failures = summarize(records, since)
        self.stdout.write("\n".join(lines))
        if failures:
            raise CommandError("demo check failed:\n  " + "\n  ".join(failures))
        self.stdout.write(self.style.SUCCESS("demo check: every promised fault produced, 0 effects executed twice."))

    def _living(self, fleet, scenarios, round_tag, pause, agents):
        rounds = 0
        while True:
            rounds += 1
            tidied = backlog_tidy()
            if any(tidied.values()):
                self.stdout.write(f"Tidied the demo's backlog (keeping the newest {BACKLOG_KEEP} of each): "
                                  f"{tidied['rejected']} request(s) rejected, {tidied['abandoned']} run(s) abandoned.")
            tag = round_tag()
            chosen = random.sample(list(scenarios), k=min(LIVING_SCENARIOS_PER_ROUND, len(scenarios)))
            self.stdout.write(f"Round {rounds} ({tag}): {', '.join(chosen)}")
            fleet.play(chosen, tag)
            fleet.listen(pause)

    def _wait_for(self, url, seconds=30):
        deadline = time.monotonic() + seconds
        while True:
            try:
                with urllib.request.urlopen(f"{url}/healthz", timeout=3):
                    return
            except urllib.error.HTTPError:
                return  # 503: it serves, a dependency is down
            except OSError as exc:
                if time.monotonic() > deadline:
                    raise CommandError(f"No Stateboard server answers at {url} ({exc}); start it with `manage.py up`.")
                time.sleep(1)
