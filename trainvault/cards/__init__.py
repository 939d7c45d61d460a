"""Cards: metadata documents that describe an approved dataset for other tools (Croissant)."""

from trainvault.cards.card_files import CardFile, check_card, reuse_croissant
from trainvault.cards.croissant import (
    CARD_NAME,
    WrittenCard,
    croissant_card,
    default_card_uri,
    write_croissant,
)

__all__ = [
    "CARD_NAME",
    "CardFile",
    "WrittenCard",
    "check_card",
    "croissant_card",
    "default_card_uri",
    "reuse_croissant",
    "write_croissant",
]
