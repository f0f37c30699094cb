from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from ledger.identities import agent_create


class Command(BaseCommand):
    help = "Create an agent identity; prints its API token alone on the last line."

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument("--owner", help="username of the human who owns this agent")

    def handle(self, *args, name, owner=None, **options):
        owner_user = None
        if owner:
            owner_user = get_user_model().objects.filter(username=owner).first()
            if owner_user is None:
                raise CommandError(f"No user named {owner!r}; create it first with create_operator.")
        try:
            _, token = agent_create(name=name, owner=owner_user)
        except ValueError as exc:
            raise CommandError(str(exc))
        self.stderr.write(f"Agent {name!r} created{f' (owned by {owner})' if owner else ''}. Its token:")
        self.stdout.write(token)
