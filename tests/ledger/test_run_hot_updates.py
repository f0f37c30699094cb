"""A run's row is updated by every event: on PostgreSQL each partition leaves room on its pages (fillfactor,
migration 0032) and a plain append changes no indexed column, so the update stays on its page (HOT) and
writes no index entry."""

import pytest
from django.db import connection, transaction

from ledger import services
from tests.factories import make_workflow

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]


def test_every_run_partition_leaves_room_for_updates_in_place():
    with connection.cursor() as cursor:
        cursor.execute("SELECT c.relname, c.reloptions FROM pg_partition_tree('ledger_run'::regclass) t "
                       "JOIN pg_class c ON c.oid = t.relid WHERE t.isleaf")
        partitions = cursor.fetchall()
    assert len(partitions) == 16
    assert all(options and "fillfactor=70" in options for _, options in partitions), partitions


@pytest.mark.django_db(transaction=True)
def test_plain_appends_update_their_runs_row_in_place():
    """Each append in a transaction of its own, as an agent's are (versions of the row that one transaction
    made itself cannot be cleared from the page before it ends), counted by that transaction."""
    wf = make_workflow(stages=["work"], effect_stages=[], approval_stages=[])
    run, _ = services.run_trigger(workflow_slug=wf.slug, inputs={}, actor="agent:a")
    services.event_append(run_id=run.id, body={"stage": "work", "kind": "started"}, actor="agent:a")
    with connection.cursor() as cursor:
        cursor.execute("SELECT tableoid FROM ledger_run WHERE id = %s", [run.id])
        (partition,) = cursor.fetchone()

    def updates(cursor) -> tuple[int, int]:  # the backend's updates of the partition not yet reported: all, in place
        cursor.execute("SELECT pg_stat_get_xact_tuples_updated(%s), pg_stat_get_xact_tuples_hot_updated(%s)",
                       [partition, partition])
        return cursor.fetchone()

    for n in range(5):
        with transaction.atomic(), connection.cursor() as cursor:
            before = updates(cursor)
            services.event_append(run_id=run.id, actor="agent:a",
                                  body={"stage": "work", "kind": "proposed", "client_event_id": f"p-{n}"})
            after = updates(cursor)
        assert (after[0] - before[0], after[1] - before[1]) == (1, 1), n
