from django.core.management.base import BaseCommand, CommandError
from django.utils.dateparse import parse_date, parse_datetime

from ledger.ops.portability import export_lines


def _moment(value: str):
    moment = parse_datetime(value)
    if moment is None:
        day = parse_date(value)
        if day is None:
            raise CommandError(f"Not a date or date-time: {value!r}")
        moment = parse_datetime(f"{day.isoformat()}T00:00:00+00:00")
    if moment.tzinfo is None:
        raise CommandError(f"Give a timezone with {value!r} (e.g. +00:00).")
    return moment


class Command(BaseCommand):
    help = "Write ledger events as JSON Lines on stdout (context lines for workflows, runs, checkpoints, approvals)."

    def add_arguments(self, parser):
        parser.add_argument("--since", help="date or ISO date-time (inclusive)")
        parser.add_argument("--until", help="date or ISO date-time (exclusive)")

    def handle(self, *args, since=None, until=None, **options):
        count = 0
        for line in export_lines(since=_moment(since) if since else None, until=_moment(until) if until else None):
            self.stdout.write(line)
            count += 1
        self.stderr.write(f"Exported {count} lines.")
