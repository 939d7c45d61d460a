"""Derived publications: datasets built from published ones (collating source splits, with repeats)."""

from trainvault.derivation.repeats import (
    CollatedShard,
    SourceDataset,
    collate_sources,
    resolve_num_repeats,
)

__all__ = ["CollatedShard", "SourceDataset", "collate_sources", "resolve_num_repeats"]
