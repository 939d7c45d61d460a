"""Component ranges of packed long-context records: the ledger, its builder, the materializer
and a varlen collate for its records.

Importing this package imports neither torch nor numpy; they are imported on use.
"""

from trainvault.components.builder import Frame, split_frame
from trainvault.components.collate import collate_sequences
from trainvault.components.ledger import ComponentLedger, ComponentLedgerPart, ledger_uri

__all__ = [
    "ComponentLedger",
    "ComponentLedgerPart",
    "Frame",
    "collate_sequences",
    "ledger_uri",
    "split_frame",
]
