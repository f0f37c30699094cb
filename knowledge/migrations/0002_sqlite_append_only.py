"""Formerly installed hand-listed SQLite guards. The guards are now generated from the models'
pgtrigger declarations after every migrate (``stateboard.db.sqlite_guards_install``), which also
drops the triggers this migration used to create."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("knowledge", "0001_initial")]
    operations = []
