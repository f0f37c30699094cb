"""``manage.py apply FILE|- [--dry-run] [--prune|--prune-all] [--as USER]``: workflows as code (SPEC §12.2)."""

import sys
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from ledger import services
from stateboard.errors import DomainError


class Command(BaseCommand):
    help = ("Make the workflows match a YAML (or .json) file of definitions under `workflows:`; prints created / "
            "changed (old → new) / unchanged / archived / restored per workflow; all or nothing, exit 1 if refused.")

    def add_arguments(self, parser):
        parser.add_argument("file", help="the definitions file (.json: JSON, anything else: YAML); - reads stdin")
        parser.add_argument("--dry-run", action="store_true", help="print what would change, write nothing")
        prune = parser.add_mutually_exclusive_group()
        prune.add_argument("--prune", action="store_true",
                           help="archive the workflows this actor (--as USER, else system:apply) applied last that "
                                "the file does not name")
        prune.add_argument("--prune-all", action="store_true",
                           help="archive every workflow this actor owns (system:apply: those without an owner) that "
                                "the file does not name")
        parser.add_argument("--as", dest="as_user", metavar="USER", help="act as this owner (default: system:apply)")

    def handle(self, *args, file, dry_run, prune, prune_all, as_user=None, **options):
        user = None
        if as_user:
            user = get_user_model().objects.filter(username=as_user).first()
            if user is None:
                raise CommandError(f"No user {as_user!r}.")
        try:
            raw = sys.stdin.buffer.read() if file == "-" else Path(file).read_bytes()
        except OSError as exc:
            raise CommandError(f"Cannot read {file}: {exc.strerror}.")
        try:
            definitions = services.file_parse(raw, json_format=file.endswith(".json"))
            outcomes = services.workflows_apply(definitions=definitions, user=user, dry_run=dry_run,
                                                prune="all" if prune_all else "apply" if prune else "")
        except DomainError as exc:
            errors = exc.extra.get("errors")
            for error in errors if isinstance(errors, list) else [{"workflow": file, "field": "", "code": exc.code,
                                                                   "detail": exc.detail}]:
                where = f"{error['workflow']}.{error['field']}" if error["field"] else error["workflow"]
                self.stderr.write(f"refused    {where}: {error['code']}: {error['detail']}")
            raise CommandError("Nothing applied.", returncode=1)
        for line in services.outcome_lines(outcomes):
            self.stdout.write(line)
        if dry_run:
            self.stdout.write("dry run: nothing written")
