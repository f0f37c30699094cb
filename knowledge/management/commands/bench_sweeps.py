"""``python manage.py bench_sweeps [--scale 1] [--db-name stateboard_bench] [--keep]``: the sweeps at scale.

Runs ``knowledge.sweeps_bench`` in a scratch database on the DATABASE_URL server (created,
migrated and dropped at the end, as ``bench ledger`` does). PostgreSQL only.
"""

from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = ("Stale-claim, checkpoint-prune and retention sweeps over 100,000 rows each (--scale scales them), "
            "in a scratch database; prints rows/s and the longest lock-holding batch.")

    def add_arguments(self, parser):
        parser.add_argument("--scale", type=float, default=1.0, help="1.0: 100,000 stale claims and checkpoints")
        parser.add_argument("--db-name", default="stateboard_bench",
                            help="name of the scratch database (created, and dropped at the end)")
        parser.add_argument("--keep", action="store_true", help="keep the scratch database afterwards")

    def handle(self, *args, scale, db_name, keep, **options):
        from knowledge import sweeps_bench
        from ledger import bench as ledger_bench

        if scale <= 0:
            raise CommandError("--scale must be positive.")
        try:
            with ledger_bench.scratch_database(db_name, ledger_bench._Out(self.stdout), keep):
                sweeps_bench.run(out=self.stdout, scale=scale)
        except ledger_bench.BenchError as exc:
            raise CommandError(str(exc))
