"""The hot path's save values (``ledger.rows.save_values``) quote exactly as Django's ``get_db_prep_save``."""

import uuid
import warnings
from datetime import datetime, timedelta, timezone

import pytest
from django.db import connection
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger import rows, sql
from ledger.models import Checkpoint, Effect, EventKind, LedgerEvent, Run

pytestmark = pytest.mark.django_db

MODELS = (Run, LedgerEvent, Checkpoint, Effect)
VALUES = st.one_of(
    st.none(), st.text(max_size=20).filter(lambda t: "\x00" not in t), st.uuids(), st.booleans(),
    st.integers(min_value=0, max_value=2**31 - 1),
    st.datetimes(timezones=st.sampled_from([timezone.utc, timezone(timedelta(hours=-5))])),
    st.datetimes(),  # naive: Django makes it aware (with a warning)
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
    st.sampled_from(list(EventKind)),  # a str subclass: not kept, goes through Django
)


def _quoted(prepare):
    """What reaches PostgreSQL: psycopg's literal of each prepared value, or the error preparing raised."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            values = prepare()
        return sql._bound(connection.connection, " ".join(["%s"] * len(values)), values)
    except Exception as exc:  # both sides must refuse the same value the same way
        return type(exc)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(model=st.sampled_from(MODELS), data=st.data())
def test_save_values_quote_as_get_db_prep_save(model, data):
    connection.ensure_connection()
    fields = tuple(f for f in model._meta.concrete_fields if not f.primary_key or model is Run)
    obj = model.__new__(model)
    for f in fields:
        obj.__dict__[f.attname] = data.draw(VALUES, label=f.attname)
    for f in fields:  # field by field: one value refused on both sides must not hide the others
        ours = _quoted(lambda: rows.save_values(rows.save_preps((f,)), [obj], connection))
        djangos = _quoted(lambda: [f.get_db_prep_save(getattr(obj, f.attname), connection)])
        assert ours == djangos, f.name


def test_the_kept_values_are_passed_on_as_they_are():
    run_id, at = uuid.uuid4(), datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    fields = tuple(LedgerEvent._meta.get_field(name) for name in ("run", "at", "stage", "seq"))
    obj = LedgerEvent.__new__(LedgerEvent)
    obj.__dict__.update(run_id=run_id, at=at, stage="build", seq=3)
    run_value, at_value, stage_value, seq_value = rows.save_values(rows.save_preps(fields), [obj], connection)
    assert run_value is run_id and at_value is at and stage_value == "build"
    assert int(seq_value) == 3  # an integer still goes through Django (psycopg's Int4)
