"""ReadableStorage: the reads a reader or loader makes, as a protocol.

`Storage` satisfies it, and so does the approval's custody storage, which is not a `Storage`
(it refuses writes and listings and serves only approved objects). Code that only reads
(the loader, the shard reader, descriptor and pack reads) takes a `ReadableStorage`, so the
custody storage is passed where a store is read without pretending to be one. Like torchdata's
``Stateful``, it names behaviour, not a base class; ``isinstance`` checks the method names.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol, runtime_checkable

from trainvault.storage.config import StorageConfig
from trainvault.storage.store import ObjectInfo


@runtime_checkable
class ReadableStorage(Protocol):
    """Bounded reads of whole objects, documents, byte ranges and streams, and object sizes; no listing, no writes."""

    @property
    def config(self) -> StorageConfig: ...

    def get(
        self, uri: str, *, if_match: str | None = None, max_bytes: int | None = None, expected_size: int | None = None
    ) -> bytes: ...

    def get_document(self, uri: str) -> bytes: ...

    def get_range(self, uri: str, start: int, end: int) -> bytes: ...

    def get_ranges(self, uri: str, ranges: Sequence[tuple[int, int]]) -> list[memoryview]: ...

    def stream(
        self,
        uri: str,
        *,
        start: int = 0,
        end: int | None = None,
        chunk_size: int = 8 << 20,
        max_bytes: int | None = None,
        expected_size: int | None = None,
    ) -> Iterator[bytes]: ...

    def head(self, uri: str) -> ObjectInfo: ...
