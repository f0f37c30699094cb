"""``python manage.py bench ledger|knowledge|sweeps|pages|agents|instructions``: print throughput and latency figures
(the benchmarks live in ``ledger.ops.bench``).

The ledger bench needs PostgreSQL. It creates its own scratch database on the same
server (``stateboard_bench`` unless ``--db-name``), migrates it, measures, and drops it
at the end (``--keep`` keeps it). It drops only what it created: a name without ``bench``
as a word, or of a database that exists already, is refused (``ledger.ops.scratch``). The
database named in DATABASE_URL is only used to reach the server; nothing is written to it. Example::

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/stateboard SECRET_KEY=x \\
        python manage.py bench ledger
"""

from django.core.management.base import BaseCommand, CommandError

from ledger.ops.bench import against, agents, costs, fleet, instructions, knowledge, ledger, longpoll, pages, sweeps
from ledger.ops.bench.cluster import private_cluster
from ledger.ops.bench.common import BenchError, Out, scratch_database


class Command(BaseCommand):
    help = (
        "Benchmark a subsystem and print the figures. 'ledger' (PostgreSQL only) creates a scratch "
        "database on the DATABASE_URL server (default name stateboard_bench; dropped at the end unless "
        "--keep), migrates it and measures: event appends/s through the service layer (1 and N clients) "
        "and through the HTTP API (granian as `up` runs it, and gunicorn; N clients) beside raw psycopg INSERT+COMMIT, checkpoint "
        "save+load/s, and the recovery decision p50/p95 with 10k and 1M ledger events loaded in bulk. "
        "Takes about 5-10 minutes at --scale 1. 'knowledge' runs ledger.ops.bench.knowledge in the same "
        "kind of scratch database; 'sweeps' the stale-claim, checkpoint-prune and retention sweeps over "
        "100,000 rows each (--scale scales them), with rows/s and the longest lock-holding batch, and 10,000 "
        "queued runs leased by 4 agents beside raw SKIP LOCKED; 'pages' the operator pages' p50/p95 server "
        "time and statements with 100,000 runs / 1,000,000 events loaded; 'agents' full runs/s of the Python "
        "client over HTTP beside the raw HTTP append, and the resume packet p50/p95 with 10,000 claims in scope; "
        "'instructions' (needs valgrind) the CPU instructions the client process spends per append, through the "
        "service layer and through the HTTP stack, beside a raw psycopg INSERT + COMMIT, counted by callgrind: "
        "figures that do not move with the machine's load; 'longpoll' a sequential client's /healthz and append p95 "
        "alone and beside 200 leases waiting 30 s (SPEC §11.3); 'fleet' N simulated agents at a model's pace "
        "(--steps), append p95, trigger→decision p95, lease wait, errors, web and database CPU per N, and the "
        "largest N with append p95 ≤ 50 ms."
    )

    def add_arguments(self, parser):
        parser.add_argument("target", choices=["ledger", "knowledge", "sweeps", "pages", "agents", "instructions",
                                               "longpoll", "fleet", "costs"], help="what to benchmark")
        parser.add_argument("--scale", type=float, default=1.0,
                            help="scale the data sizes (1.0: 1,000,000 events / 100,000 runs; tests use 0.001)")
        parser.add_argument("--skip-http", action="store_true", help="ledger: skip the HTTP API figures")
        parser.add_argument("--against", metavar="REV",
                            help="ledger, costs: run the bench of an earlier release first (a git revision of this "
                                 "repository, e.g. the release before), then this one's, and print the cost ratios")
        parser.add_argument("--skip-load", action="store_true",
                            help="ledger: skip the bulk load and the recovery-decision latency figures")
        parser.add_argument("--keep", action="store_true", help="keep the scratch database afterwards")
        parser.add_argument("--db-name", default="stateboard_bench",
                            help="name of the scratch database (created, and dropped at the end): 'bench' as a "
                                 "word in it, and no database of that name yet")
        parser.add_argument("--reps", type=int, default=5,
                            help="ledger: repetitions of each throughput measurement (the median is printed)")
        parser.add_argument("--duration", type=float, default=3.0,
                            help="ledger: seconds per throughput measurement")
        parser.add_argument("--clients", type=int, default=4, help="ledger: concurrent clients (threads)")
        parser.add_argument("--steps", default=",".join(map(str, fleet.DEFAULT_STEPS)),
                            help="fleet: the agent counts to step through, comma-separated")
        parser.add_argument("--step-seconds", type=float, default=30.0, help="fleet: seconds measured per step")
        parser.add_argument("--tracing", choices=fleet.tracing_bench.MODES, default="off",
                            help="fleet: the trace export (SPEC §16) beside the fleet: off, on, or both (each N "
                                 "without, then with it)")
        parser.add_argument("--private-cluster", action="store_true",
                            help="run on a PostgreSQL cluster of the bench's own (initdb on a free port, removed at "
                                 "the end) with pg_stat_statements, and print PostgreSQL's figures per statement "
                                 "and what its backends waited on (fleet: per step; others: for the whole run)")
        parser.add_argument("--waiters", type=int, default=200, help="longpoll: concurrent waiting leases")
        parser.add_argument("--threads", action="store_true",
                            help="longpoll: each waiter a synchronous client on a thread of its own (else asyncio)")
        parser.add_argument("--wait", type=float, default=30.0, help="longpoll: the waiters' wait_seconds (at most 30)")
        parser.add_argument("--calls", type=int, default=500,
                            help="longpoll: sequential /healthz calls and appends, alone and beside the waiters")
        parser.add_argument("--runs", type=int, default=None,
                            help="pages: runs in the table for the attribute filter's figures (SPEC §15; default "
                                 "--scale x 1,000,000: the loaded history and as many bare labelled runs as it lacks)")
        parser.add_argument("--ops", type=int, default=300,
                            help="instructions, costs: operations counted per loop (after a warm-up of as many, at most 50)")

    def handle(self, *args, **options):
        if not options["private_cluster"]:
            return self._bench(options, None)
        say = Out(self.stdout)
        try:
            with private_cluster(say) as statements:
                if options["target"] != "fleet":
                    statements.reset()
                self._bench(options, statements)
                if options["target"] != "fleet":
                    statements.report(say, requests=0)
        except BenchError as exc:
            raise CommandError(str(exc))

    def _bench(self, options, statements):
        try:
            if options["target"] in ("knowledge", "sweeps", "pages"):
                bench = {"knowledge": knowledge, "sweeps": sweeps, "pages": pages}[options["target"]]
                extra = {"runs": options["runs"]} if options["target"] == "pages" else {}
                with scratch_database(options["db_name"], Out(self.stdout), options["keep"]):
                    bench.run(out=self.stdout, scale=options["scale"], **extra)
                return
            if options["target"] in ("longpoll", "fleet"):
                with scratch_database(options["db_name"], Out(self.stdout), options["keep"]):
                    if options["target"] == "longpoll":
                        if not 1 <= options["wait"] <= 30:
                            raise CommandError("--wait must be from 1 to 30 seconds.")
                        longpoll.run_longpoll(out=self.stdout, db_name=options["db_name"], waiters=options["waiters"],
                                           calls=options["calls"], wait=options["wait"], threads=options["threads"])
                    else:
                        fleet.run_fleet(out=self.stdout, db_name=options["db_name"], steps=_steps(options["steps"]),
                                        seconds=options["step_seconds"], tracing=options["tracing"],
                                        statements=statements)
                return
            if options["target"] == "costs":
                if options["ops"] < 1:
                    raise CommandError("--ops must be positive.")
                with scratch_database(options["db_name"], Out(self.stdout), options["keep"]):
                    costs.run(out=self.stdout, db_name=options["db_name"], ops=options["ops"],
                              against=options["against"])
                return
            if options["target"] == "instructions":
                if options["ops"] < 1:
                    raise CommandError("--ops must be positive.")
                with scratch_database(options["db_name"], Out(self.stdout), options["keep"]):
                    instructions.run(out=self.stdout, db_name=options["db_name"], ops=options["ops"])
                return
            if options["scale"] <= 0:
                raise CommandError("--scale must be positive.")
            if options["reps"] < 1 or options["duration"] <= 0 or options["clients"] < 1:
                raise CommandError("--reps, --duration and --clients must be positive.")
            if options["target"] == "agents":
                with scratch_database(options["db_name"], Out(self.stdout), options["keep"]):
                    agents.run(out=self.stdout, scale=options["scale"], reps=options["reps"],
                               duration=options["duration"], clients=options["clients"], db_name=options["db_name"])
                return
            if options["against"]:
                if options["skip_load"]:
                    raise CommandError("--against compares the figures at 1M events: drop --skip-load.")
                against.run(out=self.stdout, against=options["against"], scale=options["scale"],
                            skip_http=options["skip_http"], reps=options["reps"], duration=options["duration"],
                            clients=options["clients"], db_name=options["db_name"], keep=options["keep"])
                return
            ledger.run(
                out=self.stdout, scale=options["scale"], skip_http=options["skip_http"],
                skip_load=options["skip_load"], keep=options["keep"], db_name=options["db_name"],
                reps=options["reps"], duration=options["duration"], clients=options["clients"],
            )
        except BenchError as exc:
            raise CommandError(str(exc))


def _steps(text: str) -> list[int]:
    try:
        steps = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        steps = []
    if not steps or min(steps) < 2:
        raise CommandError("--steps must be agent counts of at least 2, comma-separated (e.g. 100,250,500).")
    return steps
