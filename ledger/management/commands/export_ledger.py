from datetime import timezone as dt_timezone

from django.core.management.base import BaseCommand, CommandError
from django.utils.dateparse import parse_date, parse_datetime

from ledger.portability import export_lines


def _moment(value: str):
    moment = parse_datetime(value)
    if moment is None:
        day = parse_date(value)
        if day is None:
            raise CommandError(f"Not a date or date-time: {value!r}")
        moment = parse_datetime(f"{day.isoformat()}T00:00:00+00:00")
    if moment.tzinfo is None and "T" not in value and " " not in value:  # a date: midnight UTC
        moment = moment.replace(tzinfo=dt_timezone.utc)
    if moment.tzinfo is None:
        raise CommandError(f"Give a timezone with {value!r} (e.g. +00:00).")
    return moment


class Command(BaseCommand):
    help = ("Write the whole system as signed JSON Lines on stdout (SPEC §11.2); with --since/--until an inspection "
            "file of the events in that window, which import_ledger refuses.")

    def add_arguments(self, parser):
        parser.add_argument("--since", help="date or ISO date-time (inclusive)")
        parser.add_argument("--until", help="date or ISO date-time (exclusive)")

    def handle(self, *args, since=None, until=None, **options):
        count = 0
        out = getattr(self.stdout, "buffer", None) or getattr(self.stdout._out, "buffer", None)
        for line in export_lines(since=_moment(since) if since else None, until=_moment(until) if until else None,
                                 warn=self.stderr.write):
            if out is not None:
                out.write(line)
            else:
                self.stdout.write(line.decode("utf-8"), ending="")
            count += 1
        if out is not None:
            out.flush()
        self.stderr.write(f"Exported {count} lines.")
