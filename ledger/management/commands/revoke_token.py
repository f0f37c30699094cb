from django.core.management.base import BaseCommand, CommandError

from ledger.auth import token_revoke
from stateboard.canonical import sha256_hex


class Command(BaseCommand):
    help = "Revoke an API token (the key itself; only its hash is stored). Revoked tokens answer 401."

    def add_arguments(self, parser):
        parser.add_argument("key")

    def handle(self, *args, key, **options):
        if not token_revoke(key_hash=sha256_hex(key)):
            raise CommandError("No active token with that key.")
        self.stdout.write("Token revoked.")
