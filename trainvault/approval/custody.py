"""The storage an approved dataset reads through: only what the gate verified.

The data manifest and the shard descriptors come from the very bytes the gate hashed
(no second read that could differ). Data objects are read from the store, but only
those the manifest declares, only after their size matches the approved size, and (in
`ShardReader`) block by block, each block's SHA-256 checked before it is decoded. Writes
and reads of anything else raise `CustodyError`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any

from trainvault.errors import CustodyError, IntegrityError
from trainvault.storage import ObjectInfo, Storage, StorageConfig, normalize_uri


class CustodyStorage(Storage):
    """A read-only `Storage` over the approved objects.

    Pickles into DataLoader workers without the pinned documents: workers read only
    data objects, with descriptors handed to them.
    """

    def __init__(self, config: StorageConfig, objects: Mapping[str, int], pinned: Mapping[str, bytes] | None = None):
        super().__init__(config)
        self._objects = MappingProxyType(dict(objects))
        self._pinned = MappingProxyType(dict(pinned or {}))
        self._sized: set[str] = set()
        self._size_lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {"config": self.config, "objects": dict(self._objects)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["config"], state["objects"])  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"CustodyStorage({len(self._objects)} approved objects, {self.config!r})"

    def _approved(self, uri: str) -> str:
        uri = normalize_uri(uri)
        if uri not in self._objects:
            raise CustodyError(
                f"{uri} is not an object of the approved dataset; an approved dataset reads only the shards its "
                "approved manifest declares"
            )
        if uri not in self._sized:
            # Size first: a truncated or extended shard fails before any block is read.
            size = super().head(uri).size
            if size != self._objects[uri]:
                raise IntegrityError(
                    f"{uri} is {size} bytes, the approval binds {self._objects[uri]}: the shard changed after "
                    "approval (truncated or extended); nothing from it is used"
                )
            with self._size_lock:
                self._sized.add(uri)
        return uri

    def get(self, uri: str, **bounds: Any) -> bytes:
        """`Storage.get`; the pinned documents are the bytes the gate read under its own bounds."""
        key = normalize_uri(uri)
        if key in self._pinned:
            return self._pinned[key]
        return super().get(self._approved(key), **bounds)

    def get_range(self, uri: str, start: int, end: int) -> bytes:
        return super().get_range(self._approved(uri), start, end)

    def stream(self, uri: str, **options: Any) -> Iterator[bytes]:
        return super().stream(self._approved(uri), **options)

    def head(self, uri: str) -> ObjectInfo:
        return super().head(self._approved(uri))

    def list(self, prefix_uri: str) -> list[ObjectInfo]:
        raise CustodyError(f"cannot list {prefix_uri}: an approved dataset reads only the objects its manifest declares")

    def _refuse_write(self, uri: str) -> Any:
        raise CustodyError(f"cannot write {uri}: an approved dataset is read-only")

    def put(self, uri: str, data: bytes) -> ObjectInfo:
        return self._refuse_write(uri)

    def put_create(self, uri: str, data: bytes | bytearray | memoryview) -> bool:
        return self._refuse_write(uri)

    def delete(self, uri: str) -> None:
        self._refuse_write(uri)
