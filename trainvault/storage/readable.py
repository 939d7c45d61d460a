"""`ReadableStorage`: the reads a loader makes, which `Storage` and an approved dataset's
custody store (`trainvault.approval.guard`) both offer."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol

from trainvault.storage.store import ObjectInfo


class ReadableStorage(Protocol):
    """Whole objects, documents, byte ranges, streams and sizes by URI; no listing, no writes."""

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
