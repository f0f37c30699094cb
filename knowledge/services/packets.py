"""What each resume packet served: the claims it held as facts and leads, and those it left out."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime

from django.db import IntegrityError, transaction

from knowledge.models import PacketClaim, PacketServed


def _digest(claims: list[tuple[str, int | None, str, str]]) -> str:
    return hashlib.sha256(json.dumps(sorted(claims, key=lambda c: (c[2], c[0])), separators=(",", ":"))
                          .encode()).hexdigest()


def packet_served_record(*, run_id, served_to: str, at: datetime, budget_tokens: int, approx_tokens: int,
                         omitted: dict, claims: list[tuple[str, int | None, str, str]]) -> PacketServed:
    """Record a served packet: ``claims`` are (key, version, use, reason) with ``use`` fact, lead or
    left_out. The same reader served the same claims for the same run again is the first record
    (unique by run, reader and digest), so an agent polling its packet adds nothing."""
    digest = _digest(claims)
    found = PacketServed.objects.filter(run_id=str(run_id), served_to=served_to, digest=digest).first()
    if found is not None:
        return found
    try:
        with transaction.atomic():
            packet = PacketServed.objects.create(
                run_id=str(run_id), served_to=served_to[:200], at=at, budget_tokens=budget_tokens,
                approx_tokens=approx_tokens, omitted_facts=omitted.get("facts", 0),
                omitted_leads=omitted.get("leads", 0), digest=digest)
            PacketClaim.objects.bulk_create([PacketClaim(packet=packet, key=key[:300], version=version, use=use,
                                                         reason=reason[:30]) for key, version, use, reason in claims])
    except IntegrityError:  # a concurrent reading of the same packet recorded it first
        return PacketServed.objects.get(run_id=str(run_id), served_to=served_to, digest=digest)
    return packet
