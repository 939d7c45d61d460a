"""Cards: metadata documents that describe an approved dataset for other tools (Croissant)."""

from trainvault.cards.card_files import reuse_croissant
from trainvault.cards.croissant import write_croissant

__all__ = [
    "reuse_croissant",
    "write_croissant",
]
