"""Reads declared once as querysets of named values, sent together.

A hot request's reads are written with the ORM (the selectors' rules, one definition) by a function of
named values (``Reads``). The ORM store runs the querysets as they are. The PostgreSQL store builds and
compiles them once per process with a marker in place of each value (``Compiled``), then each call puts
the values where the markers were and sends every statement in one round trip (psycopg's pipeline, each
statement prepared like the store's hot ones): building and compiling a queryset cost more Python than
PostgreSQL spends answering it, and planning it more than running it.
"""

from __future__ import annotations

import functools
import threading
import uuid
from typing import Callable

from django.db import DEFAULT_DB_ALIAS, connection
from django.db.models import QuerySet
from django.db.models.query import FlatValuesListIterable, ModelIterable, ValuesListIterable

_MARKER_INT = -7_301_000_000  # far from any id; the n-th name's marker is this minus n
_MARKER_UUID = 0x7301 << 100  # likewise for UUIDs (plus n)


class Reads:
    """``build(**values)`` → querysets (model rows without ``select_related`` or deferral, or plain
    ``values_list``), each read in order; ``kinds`` names each value's type (``str``, ``int`` or ``uuid.UUID``)."""

    def __init__(self, build: Callable[..., list[QuerySet]], **kinds: type):
        self.build, self.kinds = build, kinds
        self._lock = threading.Lock()
        self._compiled: Compiled | None = None

    def querysets(self, values: dict) -> list[QuerySet]:
        return self.build(**self.checked(values))

    def checked(self, values: dict) -> dict:
        """The values as their kinds (a UUID given as text becomes a UUID)."""
        if set(values) != set(self.kinds):
            raise TypeError(f"Reads take exactly {sorted(self.kinds)}, not {sorted(values)}.")
        return {name: uuid.UUID(str(value)) if self.kinds[name] is uuid.UUID and not isinstance(value, uuid.UUID)
                else value for name, value in values.items()}

    def compiled(self) -> Compiled:
        with self._lock:
            if self._compiled is None:
                self._compiled = Compiled(self)
            return self._compiled


class Compiled:
    """The statements of a ``Reads`` with markers for its values, and how to turn their rows into what
    iterating each queryset gives."""

    def __init__(self, reads: Reads):
        markers = {name: _marker(name, kind, n) for n, (name, kind) in enumerate(reads.kinds.items())}
        by_marker = {marker: name for name, marker in markers.items()}
        self.statements, self.shapes = [], []
        for queryset in reads.build(**markers):
            compiler = queryset.query.get_compiler(using=DEFAULT_DB_ALIAS)
            sql, params = compiler.as_sql()  # (an empty queryset raises: a Reads has none)
            if any(str(marker) in sql for marker in markers.values()):
                raise TypeError("A value of a Reads was written into its SQL; only parameters can be put in.")
            slots = []
            for param in params:
                if param in by_marker and type(param) is type(markers[by_marker[param]]):
                    slots.append((True, by_marker[param]))
                elif any(isinstance(param, str) and isinstance(m, str) and m in param for m in markers.values()):
                    raise TypeError(f"A value of a Reads was transformed ({param!r}); use exact lookups.")
                else:
                    slots.append((False, param))
            self.statements.append((sql, slots))
            self.shapes.append(_Shape(queryset, compiler))

    def statements_with(self, values: dict) -> list[tuple[str, list]]:
        """Each statement with its parameters, ``values`` as ``Reads.checked`` gives them."""
        return [(sql, [values[value] if named else value for named, value in slots]) for sql, slots in self.statements]


def _marker(name: str, kind: type, n: int):
    if kind is str:
        return f"\x1f{name}\x1f"
    if kind is int:
        return _MARKER_INT - n
    if kind is uuid.UUID:
        return uuid.UUID(int=_MARKER_UUID + n)
    raise TypeError(f"Reads take str, int or uuid.UUID values, not {kind.__name__}.")


class _Shape:
    """One statement's columns as model fields, and what its rows become."""

    def __init__(self, queryset: QuerySet, compiler):
        if queryset.query.annotation_select or queryset.query.extra_select:
            raise TypeError("Reads read no annotations.")
        self.model, self.iterable = queryset.model, queryset._iterable_class
        if self.iterable not in (ModelIterable, ValuesListIterable, FlatValuesListIterable):
            raise TypeError("Reads read model rows or plain values_list rows.")
        if self.iterable is ModelIterable and compiler.klass_info.get("related_klass_infos"):
            raise TypeError("Reads read no select_related.")
        self.fields = [column.target for column, _, _ in compiler.select]
        self.attnames = [field.attname for field in self.fields]
        if self.iterable is ModelIterable and self.fields != list(self.model._meta.concrete_fields):
            raise TypeError("Reads read whole model rows (nothing deferred).")

    @functools.cached_property
    def converters(self) -> list[tuple[int, list]]:
        return [(i, found) for i, field in enumerate(self.fields) if (found := field.get_db_converters(connection))]

    def rows(self, raw: list) -> list:
        if self.converters:
            raw = [list(row) for row in raw]
            for row in raw:
                for i, converters in self.converters:
                    for convert in converters:
                        row[i] = convert(row[i], self.fields[i], connection)
        if self.iterable is FlatValuesListIterable:
            return [row[0] for row in raw]
        if self.iterable is ValuesListIterable:
            return [tuple(row) for row in raw]
        return [self.model.from_db(DEFAULT_DB_ALIAS, self.attnames, row) for row in raw]
