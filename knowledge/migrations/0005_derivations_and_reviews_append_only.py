"""A claim's derivations and review flags are append-only like its versions: no UPDATE, DELETE or TRUNCATE
(the tombstone GC lifts the derivations' guard with the claim's, for the versions it removes)."""

import pgtrigger.compiler
import pgtrigger.migrations
from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('knowledge', '0004_packet_served'),
    ]

    operations = [
        pgtrigger.migrations.RemoveTrigger(
            model_name='claimderivation',
            name='append_only',
        ),
        pgtrigger.migrations.RemoveTrigger(
            model_name='claimreview',
            name='append_only',
        ),
        pgtrigger.migrations.AddTrigger(
            model_name='claimderivation',
            trigger=pgtrigger.compiler.Trigger(name='append_only', sql=pgtrigger.compiler.UpsertTriggerSql(func="RAISE EXCEPTION 'pgtrigger: Cannot update or delete rows from % table', TG_TABLE_NAME;", hash='648bf8a913ba3a7072560da22a5353492596a2f7', operation='UPDATE OR DELETE', pgid='pgtrigger_append_only_e90f4', table='knowledge_claimderivation', when='BEFORE')),
        ),
        pgtrigger.migrations.AddTrigger(
            model_name='claimderivation',
            trigger=pgtrigger.compiler.Trigger(name='no_truncate', sql=pgtrigger.compiler.UpsertTriggerSql(func="RAISE EXCEPTION 'pgtrigger: Cannot truncate % table: it is append-only', TG_TABLE_NAME;", hash='3632dee670f7aed61d2dc33de27b9da03965cb01', level='STATEMENT', operation='TRUNCATE', pgid='pgtrigger_no_truncate_11aea', table='knowledge_claimderivation', when='BEFORE')),
        ),
        pgtrigger.migrations.AddTrigger(
            model_name='claimreview',
            trigger=pgtrigger.compiler.Trigger(name='append_only', sql=pgtrigger.compiler.UpsertTriggerSql(func="RAISE EXCEPTION 'pgtrigger: Cannot update or delete rows from % table', TG_TABLE_NAME;", hash='0afe1eb0355f32cf8b16181b3d005ba344ad505d', operation='UPDATE OR DELETE', pgid='pgtrigger_append_only_2b089', table='knowledge_claimreview', when='BEFORE')),
        ),
        pgtrigger.migrations.AddTrigger(
            model_name='claimreview',
            trigger=pgtrigger.compiler.Trigger(name='no_truncate', sql=pgtrigger.compiler.UpsertTriggerSql(func="RAISE EXCEPTION 'pgtrigger: Cannot truncate % table: it is append-only', TG_TABLE_NAME;", hash='ff0c0d849fe75115993502534e42ece88457e031', level='STATEMENT', operation='TRUNCATE', pgid='pgtrigger_no_truncate_25c98', table='knowledge_claimreview', when='BEFORE')),
        ),
    ]
