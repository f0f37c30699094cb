"""The whole system as one signed JSON Lines file, and back (SPEC §11.2).

``export.export_lines`` writes it from one snapshot; ``load.import_file`` loads it into an empty database
in one transaction and writes nothing unless the signature, every chain and every field the ledger
determines hold; ``rows`` turns model rows into lines and back; ``signing`` holds the key and the HMAC.
"""

from ledger.portability.export import export_lines
from ledger.portability.load import ImportRefused, import_file

__all__ = ["ImportRefused", "export_lines", "import_file"]
