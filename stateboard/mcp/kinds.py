"""The event kinds an agent may post, each with what it says: ``ledger.domain.kinds.KINDS``'s agent-postable
kinds in its order. A copy, since stateboard imports no app and this server runs beside the agent;
tests/ledger/test_event_kinds.py holds it to ``KINDS`` (and prints the text to paste when they differ)."""

AGENT_KINDS = (
    ("started", "a stage starts; on an effect stage it claims the effect key"),
    ("proposed", "an executor stage's action is handed to Stateboard's executor"),
    ("succeeded", "the stage passed (with the effect on an effect stage)"),
    ("failed", "the stage failed, or a checked effect never happened (effect_absent)"),
    ("skipped", "the stage is not needed"),
    ("verified", "the effect was checked and is there (evidence required)"),
    ("unknown", "the effect's outcome was not observed: it must be verified"),
    ("corrected", "a note correcting an earlier event (data.corrects)"),
    ("compensated", "the approved compensation was performed and verified"),
    ("attributes_set", "the run's attributes added or changed (data.attributes; null removes a key); moves nothing"),
)
