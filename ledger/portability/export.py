"""``export_ledger``: the whole system from one snapshot, a typed line per row, signed (SPEC §11.2)."""

from __future__ import annotations

import json
from typing import Iterable, Iterator

from django.db import connection, transaction

import ledger.portability.signing as signing
from ledger.models import LedgerEvent
from ledger.portability.rows import IDENTITY_TYPES, SYSTEM_TYPES, row_line
from ledger.store import store

FORMAT = 2


def _line(obj: dict) -> bytes:
    return (json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")


def _rows() -> Iterator[dict]:
    for line_type, model in IDENTITY_TYPES + SYSTEM_TYPES:
        rows = model.objects.order_by("run_id", "seq") if model is LedgerEvent else model.objects.order_by("pk")
        if line_type == "user":
            rows = rows.prefetch_related("groups")
        for obj in rows.iterator(chunk_size=2000):
            yield row_line(line_type, obj)


def export_lines(*, since=None, until=None, warn=lambda text: None) -> Iterable[bytes]:
    """The file's lines as bytes, each with its LF. With ``since``/``until``: an inspection file of the
    events in that window (``format: "partial"``), which the import refuses."""
    if since or until:
        yield _line({"type": "export", "format": "partial"})
        events = LedgerEvent.objects.order_by("id")
        events = events.filter(at__gte=since) if since else events
        events = events.filter(at__lt=until) if until else events
        for event in events.iterator(chunk_size=2000):
            yield _line(row_line("event", event))
        return
    key = signing.signing_key()
    outermost = not connection.in_atomic_block
    with transaction.atomic():
        if outermost:  # (inside a caller's transaction, its snapshot is the one read)
            store().snapshot_begin()
        mac = signing.hmac_new(key) if key else None
        for obj in ({"type": "export", "format": FORMAT}, *_rows()):
            line = _line(obj)
            if mac is not None:
                mac.update(line)
            yield line
    if mac is None:
        warn("No signature: the embedded default SECRET_KEY signs nothing (set SECRET_KEY or STATEBOARD_EXPORT_KEY); "
             "import it with --trust-unsigned.")
        return
    yield _line({"type": "signature", "alg": "HMAC-SHA256", "hmac": mac.hexdigest()})
