"""Run attributes (SPEC §15): the one rule of what an attribute is, for the trigger, the ``attributes_set``
event, the ``attr.<key>=<value>`` filter and the alert rules' selection.

An attributes object has at most 16 keys (``[a-z][a-z0-9_]{0,39}``); a value is a string of at most 200
characters, an integer (64-bit) or a boolean. A string that reads as a date-time (``YYYY-MM-DDTHH:MM…``) is an
ISO-8601 time: it must carry its zone and is stored in UTC (``2026-01-01T00:00:00Z``), so one instant is one
value whichever offset it was written in. Attributes are not inputs: no fingerprint and no decision reads them.
"""

from __future__ import annotations

import re
from datetime import timezone as dt_timezone
from typing import Iterable

from stateboard.errors import Invalid
from stateboard.moments import parse_moment

KEY = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
MAX_KEYS = 16
MAX_TEXT = 200
INT_LIMIT = 2 ** 63  # (a JSON number both databases keep exactly)
FILTER_PREFIX = "attr."
_TIME_LIKE = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}")
_INTEGER = re.compile(r"^-?(0|[1-9][0-9]*)$")
KIND = "attributes_set"


class AttributesInvalid(Invalid):
    """422 ``invalid_attributes``."""

    def __init__(self, detail: str, **extra):
        super().__init__("invalid_attributes", detail, **extra)


def _time(text: str) -> str | None:
    """A date-time text in UTC as stored (``…Z``), or None when it has no zone or is no time."""
    moment = parse_moment(text)
    if moment is None:
        return None
    return moment.astimezone(dt_timezone.utc).isoformat().replace("+00:00", "Z")


def attribute_value(key, value):
    """One value as stored, or ``AttributesInvalid``."""
    if not isinstance(key, str) or not KEY.match(key):
        raise AttributesInvalid(f"Attribute key {key!r} must match [a-z][a-z0-9_]{{0,39}}.", key=str(key)[:60])
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        if not -INT_LIMIT <= value < INT_LIMIT:
            raise AttributesInvalid(f"Attribute {key!r}: an integer must fit in 64 bits.", key=key)
        return value
    if isinstance(value, str):
        if len(value) > MAX_TEXT:
            raise AttributesInvalid(f"Attribute {key!r}: a string has at most {MAX_TEXT} characters.", key=key)
        if _TIME_LIKE.match(value):
            stored = _time(value)
            if stored is None:
                raise AttributesInvalid(f"Attribute {key!r}: a time must be ISO 8601 with its zone "
                                        "(2026-01-01T00:00:00Z).", key=key)
            return stored
        return value
    raise AttributesInvalid(f"Attribute {key!r}: a value is a string, an integer, a boolean or an ISO 8601 time "
                            f"(not {type(value).__name__}).", key=key)


def _object(value, what: str) -> dict:
    if not isinstance(value, dict):
        raise AttributesInvalid(f"{what} must be an object of at most {MAX_KEYS} keys.")
    return value


def _at_most(attributes: dict, what: str) -> dict:
    if len(attributes) > MAX_KEYS:
        raise AttributesInvalid(f"{what} has {len(attributes)} keys; at most {MAX_KEYS}.")
    return attributes


def attributes_checked(value) -> dict:
    """A trigger's ``attributes`` (None: none) as stored."""
    if value is None:
        return {}
    given = _at_most(_object(value, "attributes"), "attributes")
    return {key: attribute_value(key, item) for key, item in given.items()}


def attributes_merged(current: dict, changes) -> dict:
    """``current`` with an ``attributes_set``'s ``changes`` (a null value removes its key); the 16 keys count
    the result."""
    changes = _at_most(_object(changes, "data.attributes"), "data.attributes")
    merged = dict(current or {})
    for key, item in changes.items():
        if item is None:
            attribute_value(key, "")  # (the key is still checked)
            merged.pop(key, None)
        else:
            merged[key] = attribute_value(key, item)
    return _at_most(merged, "The run's attributes with these changes")


def attributes_replay(events: Iterable) -> dict:
    """A run's attributes from its events (in seq order): the ``attributes_set`` events merged in turn (the
    trigger writes its attributes as the run's first such event)."""
    attributes: dict = {}
    for event in events:
        if event.kind == KIND:
            attributes = attributes_merged(attributes, (event.data or {}).get("attributes") or {})
    return attributes


# ---------------------------------------------------------------- selection: attr.<key>=<value>

def matching_values(text: str) -> tuple:
    """The stored values a query value matches: ``2`` the integer 2 and the string "2", ``true`` the boolean
    and the string "true", a time its instant (any offset), anything else the string itself."""
    if _INTEGER.match(text) and -INT_LIMIT <= int(text) < INT_LIMIT:
        return int(text), text
    if text in ("true", "false"):
        return text == "true", text
    if _TIME_LIKE.match(text):
        return (_time(text) or text,)
    return (text,)


def selection_parse(pairs: Iterable[tuple[str, str]]) -> list[tuple[str, tuple]]:
    """(key, the values it matches) for each ``attr.<key>=<value>`` (a repeated key: each must hold), or
    ``AttributesInvalid`` for a key that is no attribute key or a value no attribute can have."""
    found = []
    for key, text in pairs:
        if not isinstance(key, str) or not KEY.match(key):
            raise AttributesInvalid(f"attr.{key}: an attribute key matches [a-z][a-z0-9_]{{0,39}}.")
        if not isinstance(text, str) or len(text) > MAX_TEXT:
            raise AttributesInvalid(f"attr.{key}: a value has at most {MAX_TEXT} characters.")
        found.append((key, matching_values(text)))
    return found


def query_pairs(params) -> list[tuple[str, str]]:
    """The ``attr.<key>`` parameters of a query (a QueryDict: every value of a repeated key; a dict)."""
    values = params.getlist if hasattr(params, "getlist") else (lambda name: [params[name]])
    return [(name[len(FILTER_PREFIX):], value) for name in params if name.startswith(FILTER_PREFIX)
            for value in values(name)]


def query_text(value) -> str:
    """A stored value as the query writes it (an alert rule's selection is matched as its query would be)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def rule_selection(selection) -> list[tuple[str, tuple]]:
    """An alert rule's ``attributes`` as the runs it selects: each key equal, as ``attr.<key>=<value>``."""
    selection = _at_most(_object(selection or {}, "attributes"), "attributes")
    for key, value in selection.items():
        attribute_value(key, value)
    return selection_parse((key, query_text(value)) for key, value in selection.items())
