from django.core.management.base import BaseCommand, CommandError

from ledger.identities import operator_create
from stateboard.roles import HUMAN_ROLES


class Command(BaseCommand):
    help = "Create a human user in a role; with --token prints an API token alone on the last line."

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument("--role", required=True, choices=HUMAN_ROLES)
        parser.add_argument("--password", help="password for the pages (omit for API-only users)")
        parser.add_argument("--token", action="store_true", help="also issue an API token")
        parser.add_argument("--slack-id", metavar="TEAM:USER",
                            help="the Slack user (team id:user id) whose buttons in chat decide as this operator")
        parser.add_argument("--group", action="append", default=[], metavar="G",
                            help="an approver group the person is in (repeatable; SPEC §17: group:G in approval_rules)")
        parser.add_argument("--superuser", action="store_true",
                            help="also make the user a Django superuser (the read-only admin at /admin/)")

    def handle(self, *args, name, role, password=None, token=False, superuser=False, slack_id=None, group=(),
               **options):
        try:
            user, key = operator_create(name=name, role=role, password=password, with_token=token,
                                        slack_id=slack_id, groups=group)
        except ValueError as exc:
            raise CommandError(str(exc))
        if superuser:
            user.is_staff = user.is_superuser = True
            user.save(update_fields=["is_staff", "is_superuser"])
        self.stderr.write(f"Operator {name!r} has role {role!r}{' and is a superuser' if superuser else ''}"
                          f"{f' and is Slack user {slack_id}' if slack_id else ''}"
                          f"{f' in approver groups {sorted(set(group))}' if group else ''}.")
        if key:
            self.stdout.write(key)
