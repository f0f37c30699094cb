"""Model instances and save values as the ORM makes them, without its per-field loops: the ledger's hot
path builds and sends a run's ~40 columns on every append (``ledger.sql``), where Django's generic code
spends more than the statements themselves. Each function says what of Django's it stands for; tests
hold them equal (``tests/ledger/test_row_instances.py``, ``tests/ledger/test_save_values.py``)."""

from __future__ import annotations

import functools
import uuid
from datetime import datetime

from django.db import DEFAULT_DB_ALIAS, connection, connections, models
from django.db.models.base import ModelState
from django.db.models.signals import post_init, pre_init


def save_values(preps: tuple, objects: list, db) -> list:
    """``field.get_db_prep_save(value)`` for each object and field, sparing the call where it would return
    the value unchanged (``save_preps``)."""
    return [value if type(value) is kept else prep(value, db)
            for obj in objects for attname, kept, prep in preps for value in (getattr(obj, attname),)]


def save_preps(fields: tuple) -> tuple:
    """(attname, kept type, prep) for each field: on PostgreSQL ``get_db_prep_save`` returns a value of
    the kept type unchanged (a str in a CharField or TextField, a UUID in a UUIDField or a foreign key to
    one, a bool in a BooleanField); every other value goes through it (an aware datetime in a
    DateTimeField through ``_datetime_prep``)."""
    preps = []
    for f in fields:
        target = f.target_field if f.is_relation else f
        kept = _KEPT.get(type(target), _Never)
        prep = f.get_db_prep_save
        if type(target) is models.DateTimeField:
            prep = functools.partial(_datetime_prep, prep)
        preps.append((f.attname, kept, prep))
    return tuple(preps)


_KEPT = {models.CharField: str, models.TextField: str, models.UUIDField: uuid.UUID, models.BooleanField: bool}


class _Never:
    """No value is of this type: the field's values always go through their prep."""


def _datetime_prep(prep, value, db):
    """An aware datetime is saved as it is (a naive one is made aware, with Django's warning)."""
    return value if type(value) is datetime and value.utcoffset() is not None else prep(value, db)


class Columns(list):
    """(field, [converters]) pairs that turn raw database values into Python ones, as the ORM does, with
    what a row needs precomputed: the attnames, and only the columns that have converters (a run's JSON
    columns; most have none), each with its column expression."""

    def __init__(self, model, fields):
        table = model._meta.db_table
        super().__init__((f, connection.ops.get_db_converters(f.get_col(table)) + f.get_db_converters(connection))
                         for f in fields)
        self.attnames = [f.attname for f, _ in self]
        self.converting = tuple((i, f.get_col(table), converters) for i, (f, converters) in enumerate(self)
                                if converters)


def python_values(converted: Columns, values, db) -> list:
    """Raw database values as the ORM would give them (the converters of ``Columns``)."""
    out = list(values)
    for i, column, converters in converted.converting:
        value = out[i]
        for convert in converters:
            value = convert(value, column, db)
        out[i] = value
    return out


def from_row(model, converted: Columns, values, db=None):
    """The model instance for a row of ``converted`` columns (the others deferred)."""
    return instance(model, converted.attnames, python_values(converted, values, db or connections[DEFAULT_DB_ALIAS]))


def instance(model, attnames: list[str], values) -> object:
    """What ``model.from_db`` makes of Python values. Without ``pre_init`` / ``post_init`` receivers for the
    model, ``Model.__init__`` only stores each value under its attname in a fresh instance, so that is done
    directly (a third of the conversion's cost for a run's ~40 columns; ``tests/ledger/test_row_instances.py``)."""
    if pre_init.has_listeners(model) or post_init.has_listeners(model):
        return model.from_db(DEFAULT_DB_ALIAS, attnames, list(values))
    instance = model.__new__(model)
    instance.__dict__.update(zip(attnames, values))
    state = instance._state = ModelState()
    state.adding, state.db = False, DEFAULT_DB_ALIAS
    return instance


def model_new(model, values: dict):
    """``model(**values)`` for a new row whose ``values`` are keyed by concrete fields' attnames (the other
    fields take their defaults). As with ``instance``, without ``pre_init`` / ``post_init`` receivers
    ``Model.__init__`` only stores each value (or default) under its attname, so that is done directly;
    anything else (a related object, a property, an unknown name) goes through ``model(**values)``."""
    attnames, fields = _new_fields(model)
    if pre_init.has_listeners(model) or post_init.has_listeners(model) or not values.keys() <= attnames:
        return model(**values)
    instance = model.__new__(model)
    instance._state = ModelState()
    stored = instance.__dict__
    for attname, field in fields:
        stored[attname] = values[attname] if attname in values else field.get_default()
    return instance


@functools.cache
def _new_fields(model) -> tuple[frozenset, tuple]:
    fields = tuple((f.attname, f) for f in model._meta.concrete_fields if not f.generated)
    return frozenset(attname for attname, _ in fields), fields
