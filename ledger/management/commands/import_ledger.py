import sys

from django.core.management.base import BaseCommand, CommandError

from ledger.ops.portability import ImportRefused, import_file


class Command(BaseCommand):
    help = "Load a complete export_ledger file into an empty database (chains must verify, no gaps)."

    def add_arguments(self, parser):
        parser.add_argument("file", help="path to the JSON Lines file, or - for stdin")

    def handle(self, *args, file, **options):
        try:
            stream = sys.stdin if file == "-" else open(file, encoding="utf-8")
        except OSError as exc:
            raise CommandError(f"Cannot read {file}: {exc}")
        with stream:
            try:
                counts = import_file(stream)
            except ImportRefused as exc:
                raise CommandError(f"Refused: {exc}")
        self.stdout.write("Imported " + ", ".join(f"{v} {k}" for k, v in counts.items()) + ".")
