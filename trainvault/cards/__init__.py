"""Cards: metadata documents that describe an approved dataset for other tools (Croissant)."""

from trainvault.cards.croissant import (
    CARD_NAME,
    WrittenCard,
    croissant_card,
    default_card_uri,
    write_croissant,
)

__all__ = ["CARD_NAME", "WrittenCard", "croissant_card", "default_card_uri", "write_croissant"]
