"""Logical records: a hook that turns each verified block's records into what the loader batches.

With a view, plan positions count logical records (a block holds as many as the view
says, computed without reading data), so the global order, dealing to workers and the
resume state work unchanged: a position finds its block, and the view finds the record
and range inside it. The component range materializer is one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from trainvault.publication.manifest import ShardDescriptor, ShardEntry


class RecordView(Protocol):
    #: Binds the resume state: a state only resumes under the same view.
    view_sha256: str

    def block_counts(self, entry: ShardEntry, descriptor: ShardDescriptor) -> list[int]:
        """Logical records of each block of a shard."""

    def expand(self, entry: ShardEntry, first_record: int, records: list[Any]) -> list[Any]:
        """The logical records of one verified, decoded block, exactly `block_counts` of them."""

    def collate(self, collate_fn: Callable[[list[Any]], Any]) -> Callable[[list[Any]], Any]:
        """The collate the loader applies to batches of `expand`'s records, given the user's."""
