
from django.conf import settings
from django.db import migrations, models
from django.db.models import OuterRef, Subquery


def refresh_due_backfill(apps, schema_editor):
    """Live claims are on the stale sweep's list until their owner has been told (once)."""
    Claim, ClaimHead = apps.get_model("knowledge", "Claim"), apps.get_model("knowledge", "ClaimHead")
    ClaimHead.objects.filter(live=True, current__isnull=False).update(
        refresh_due_at=Subquery(Claim.objects.filter(id=OuterRef("current_id")).values("refresh_after")[:1]))


class Migration(migrations.Migration):

    dependencies = [
        ('knowledge', '0002_sqlite_append_only'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name='claim',
            name='erased_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='claimhead',
            name='refresh_due_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddIndex(
            model_name='claim',
            index=models.Index(condition=models.Q(('erased_at__isnull', True), ('retention_until__isnull', False), ('sensitivity', 'sensitive')), fields=['retention_until'], name='claim_retention_due'),
        ),
        migrations.AddIndex(
            model_name='claimhead',
            index=models.Index(condition=models.Q(('refresh_due_at__isnull', False)), fields=['refresh_due_at'], name='claimhead_refresh_due'),
        ),
        migrations.RunPython(refresh_due_backfill, migrations.RunPython.noop),
    ]
