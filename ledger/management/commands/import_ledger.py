import sys

from django.core.management.base import BaseCommand, CommandError

from ledger.portability import ImportRefused, import_file


class Command(BaseCommand):
    help = ("Load a complete export_ledger file into an empty database, in one transaction: the signature, every "
            "chain and every field the ledger determines must hold, else nothing is written (exit 1).")

    def add_arguments(self, parser):
        parser.add_argument("file", help="the export file, or - for stdin")
        parser.add_argument("--trust-unsigned", action="store_true",
                            help="accept a file without a signature line (never a bad one); imports no identities")

    def handle(self, *args, file, trust_unsigned=False, **options):
        try:
            data = sys.stdin.buffer.read() if file == "-" else open(file, "rb").read()
        except OSError as exc:
            raise CommandError(f"Cannot read {file}: {exc}")
        try:
            counts = import_file(data, trust_unsigned=trust_unsigned)
        except ImportRefused as exc:
            raise CommandError(f"Refused: {exc}")
        self.stdout.write("Imported " + ", ".join(f"{v} {k}" for k, v in counts.items()) + ".")
