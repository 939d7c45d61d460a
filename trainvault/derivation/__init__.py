"""Derived publications: datasets built from published ones (collating source splits, with repeats)."""

from trainvault.derivation.repeats import SourceDataset, collate_sources

__all__ = [
    "SourceDataset",
    "collate_sources",
]
