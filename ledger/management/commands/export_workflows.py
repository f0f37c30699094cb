"""``manage.py export_workflows``: every workflow (archived ones left out) in the YAML file form ``apply`` reads."""

from django.core.management.base import BaseCommand

from ledger import services
from ledger.models import Workflow


class Command(BaseCommand):
    help = "Print every workflow as the YAML file `manage.py apply` takes back unchanged (SPEC §12.2)."

    def handle(self, *args, **options):
        workflows = Workflow.objects.filter(archived_at__isnull=True).select_related("owner").order_by("slug")
        self.stdout.write(services.file_form(workflows), ending="")
