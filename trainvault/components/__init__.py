"""Component ranges of packed long-context records: the ledger, its builder, the materializer
and a varlen collate for its records.

Importing this package imports neither torch nor numpy; they are imported on use.
"""

from trainvault.components.builder import Binding, Frame, build_component_ledger, split_frame
from trainvault.components.collate import collate_sequences
from trainvault.components.ledger import (
    LEDGER_NAME,
    ComponentLedger,
    ComponentLedgerPart,
    LedgerFrame,
    LedgerPartRef,
    LedgerRange,
    LedgerRecord,
    ledger_sidecar_name,
    ledger_uri,
    range_id,
    token_digest,
)
from trainvault.components.materializer import MODES, ComponentRangeMaterializer

__all__ = [
    "LEDGER_NAME",
    "MODES",
    "Binding",
    "ComponentLedger",
    "ComponentLedgerPart",
    "ComponentRangeMaterializer",
    "Frame",
    "LedgerFrame",
    "LedgerPartRef",
    "LedgerRange",
    "LedgerRecord",
    "build_component_ledger",
    "collate_sequences",
    "ledger_sidecar_name",
    "ledger_uri",
    "range_id",
    "split_frame",
    "token_digest",
]
