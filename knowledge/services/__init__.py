"""Every write to the knowledge store, one module per family of verbs.

Locking order, everywhere: the key's ``ClaimHead`` rows (sorted by key), then the
``StoreCounter`` row last (``store_versions_reserve``), held until commit. Store versions are
therefore committed in order, and writers of different keys only queue on the counter for the
few statements between their INSERT and COMMIT. versions (heads, store versions, appends, gate
decisions) < claims, tombstones, reconcile, citations; packets (what resume packets served) stands alone.
"""

from knowledge.services.citations import claim_citations_record
from knowledge.services.claims import claim_accept, claim_propose, claim_refresh
from knowledge.services.packets import packet_served_record
from knowledge.services.reconcile import knowledge_reconcile
from knowledge.services.tombstones import claim_invalidate, claim_revoke, tombstones_append, tombstones_gc
from knowledge.services.versions import WriteGateRejected, store_versions_reserve
from stateboard.errors import Conflict, Invalid, NotFound

__all__ = [
    "Conflict", "Invalid", "NotFound", "WriteGateRejected", "claim_accept", "claim_citations_record",
    "claim_invalidate", "claim_propose", "claim_refresh", "claim_revoke", "knowledge_reconcile",
    "packet_served_record",
    "store_versions_reserve", "tombstones_append", "tombstones_gc",
]
