"""What a storage backend offers `Storage`, and the plain exceptions it signals with.

Backends work on paths inside one store and raise their native errors (OSError, obstore's);
`translate` turns those, and the signals below, into trainvault errors that name the URI.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol


@dataclass(frozen=True)
class StoredObject:
    """An object as a backend sees it: its path inside the store."""

    path: str
    size: int
    etag: str | None
    last_modified: datetime | None = None


@dataclass(frozen=True)
class OpenedStream:
    """A body being read: the etag of the version opened, and its chunks."""

    etag: str | None
    chunks: Iterator[bytes]


class Backend(Protocol):
    def get(self, path: str, if_match: str | None = None, limit: int | None = None) -> bytes: ...

    def get_range(self, path: str, start: int, end: int) -> bytes: ...

    def get_ranges(self, path: str, ranges: Sequence[tuple[int, int]]) -> Sequence[Any]: ...

    def open_stream(
        self, path: str, start: int, end: int | None, chunk_size: int, if_match: str | None, limit: int | None = None
    ) -> OpenedStream: ...

    def head(self, path: str) -> StoredObject: ...

    def list(self, prefix: str) -> Iterator[StoredObject]: ...

    def put(self, path: str, data: Any) -> str | None: ...

    def create(self, path: str, data: Any) -> bool: ...

    def delete(self, path: str) -> None: ...


class NotRegular(Exception):
    """The path names a FIFO, socket, device or other non-regular file."""

    def __init__(self, kind: str, path: str = ""):
        super().__init__(kind, path)
        self.kind, self.path = kind, path


class TooLarge(Exception):
    """An object holds more bytes than the read allows (`size` None: found while reading)."""

    def __init__(self, size: int | None, limit: int):
        super().__init__(size, limit)
        self.size, self.limit = size, limit


class ObjectChanged(Exception):
    """The object's etag no longer matches the one a read was pinned to."""


def check_limit(size: int, limit: int | None) -> None:
    if limit is not None and size > limit:
        raise TooLarge(size, limit)


def read_limit(max_bytes: int | None, expected_size: int | None) -> int | None:
    """The most bytes a read may deliver: the smaller of the caller's cap and the bound size."""
    limits = [n for n in (max_bytes, expected_size) if n is not None]
    return min(limits) if limits else None
