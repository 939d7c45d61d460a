"""The guard an approved dataset reads through: only what the gate verified.

The data manifest and the shard descriptors come from the very bytes the gate hashed
(no second read that could differ). Data objects are read from the store, but only
those the manifest declares, only after their size matches the approved size, and (in
`ShardReader`) block by block, each block's SHA-256 checked before it is decoded. Writes
and reads of anything else raise `CustodyError`.

The guard holds a `Storage` and exposes only the reads a loader makes; it is not one.
Custody is issued, not built: `CustodyStorage()` raises `TypeError`, and a copy or a
pickle of one raises `TypeError` too, except while a worker process is being started
(a forked worker inherits it unpickled). There it travels as an `ApprovedObjects` reader: the approved data objects and their
sizes, no pinned manifest or descriptors (the worker is handed the verified descriptors
with its dataset), and not a `CustodyStorage`, so nothing takes it for custody. Unpickling
cannot be made to yield custody over other documents: no pickle rebuilds a `CustodyStorage`.
"""

from __future__ import annotations

import multiprocessing.context
import threading
from collections.abc import Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any, NoReturn

from trainvault.errors import CustodyError, IntegrityError
from trainvault.storage import Storage, StorageConfig
from trainvault.storage.store import ObjectInfo
from trainvault.uris import normalize_uri

_ISSUE = object()


class ApprovedObjects:
    """Reads of listed data objects through a `Storage` it holds, each object read only once its
    size matches; writes and listings are refused. It is not a `Storage`: it offers the reads a
    loader makes (`get`, `get_document`, `get_range`, `get_ranges`, `stream`, `head`) and nothing else.

    What a DataLoader worker gets in place of a `CustodyStorage`; it pickles as its list.
    """

    def __init__(self, config: StorageConfig, objects: Mapping[str, int]):
        self._storage = Storage(config)
        self._objects = MappingProxyType(dict(objects))
        self._sized: set[str] = set()
        self._size_lock = threading.Lock()

    @property
    def config(self) -> StorageConfig:
        return self._storage.config

    def __reduce__(self) -> Any:
        return ApprovedObjects, (self.config, dict(self._objects))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self._objects)} approved objects, {self.config!r})"

    def _approved(self, uri: str) -> str:
        uri = normalize_uri(uri)
        if uri not in self._objects:
            raise CustodyError(
                f"{uri} is not an object of the approved dataset; an approved dataset reads only the shards its "
                "approved manifest declares"
            )
        if uri not in self._sized:
            # Size first: a truncated or extended shard fails before any block is read.
            size = self._storage.head(uri).size
            if size != self._objects[uri]:
                raise IntegrityError(
                    f"{uri} is {size} bytes, the approval binds {self._objects[uri]}: the shard changed after "
                    "approval (truncated or extended); nothing from it is used"
                )
            with self._size_lock:
                self._sized.add(uri)
        return uri

    def get(self, uri: str, **bounds: Any) -> bytes:
        return self._storage.get(self._approved(uri), **bounds)

    def get_document(self, uri: str) -> bytes:
        """`get` under the document cap, as `Storage.get_document`."""
        return self.get(uri, max_bytes=self.config.max_document_bytes)

    def get_range(self, uri: str, start: int, end: int) -> bytes:
        return self._storage.get_range(self._approved(uri), start, end)

    def get_ranges(self, uri: str, ranges: Sequence[tuple[int, int]]) -> list[memoryview]:
        return self._storage.get_ranges(self._approved(uri), ranges)

    def stream(self, uri: str, **options: Any) -> Iterator[bytes]:
        return self._storage.stream(self._approved(uri), **options)

    def head(self, uri: str) -> ObjectInfo:
        return self._storage.head(self._approved(uri))

    def list(self, prefix_uri: str) -> list[ObjectInfo]:
        raise CustodyError(
            f"cannot list {prefix_uri}: an approved dataset reads only the objects its manifest declares"
        )

    def _refuse_write(self, uri: str) -> NoReturn:
        raise CustodyError(f"cannot write {uri}: an approved dataset is read-only")

    def put(self, uri: str, data: bytes) -> ObjectInfo:
        return self._refuse_write(uri)

    def put_create(self, uri: str, data: bytes | bytearray | memoryview) -> bool:
        return self._refuse_write(uri)

    def delete(self, uri: str) -> None:
        self._refuse_write(uri)


class CustodyStorage(ApprovedObjects):
    """The guard over the approved objects that also serves the approved manifest and descriptors
    from the bytes the gate hashed. Get one from `ApprovedDataset.custody_storage()`."""

    _pinned: tuple[Mapping[str, bytes], ...]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError(
            "CustodyStorage cannot be constructed directly; get one from ApprovedDataset.custody_storage() of a "
            "dataset that passed the approval gate"
        )

    @classmethod
    def _issue(
        cls, token: object, config: StorageConfig, objects: Mapping[str, int], pinned: tuple[Mapping[str, bytes], ...]
    ) -> CustodyStorage:
        if token is not _ISSUE:
            raise TypeError("a CustodyStorage is issued by an ApprovedDataset only")
        self = object.__new__(cls)
        ApprovedObjects.__init__(self, config, objects)
        self._pinned = tuple(MappingProxyType(p) if isinstance(p, dict) else p for p in pinned)
        return self

    def __reduce__(self) -> Any:
        # Only a worker start pickles custody, and then as the data objects alone.
        if multiprocessing.context.get_spawning_popen() is None:
            _refuse_copy()
        return ApprovedObjects, (self.config, dict(self._objects))

    def __copy__(self) -> Any:
        _refuse_copy()

    def __deepcopy__(self, memo: Any) -> Any:
        _refuse_copy()

    def get(self, uri: str, **bounds: Any) -> bytes:
        """The pinned documents are the bytes the gate read under its own bounds."""
        key = normalize_uri(uri)
        for documents in self._pinned:
            if key in documents:
                return documents[key]
        return super().get(key, **bounds)


def _refuse_copy() -> NoReturn:
    raise TypeError("a CustodyStorage does not pickle or copy: get it from the ApprovedDataset where it is needed")


def issue_custody(config: StorageConfig, objects: Mapping[str, int], *pinned: Mapping[str, bytes]) -> CustodyStorage:
    """The `CustodyStorage` of an approved dataset (internal to trainvault.approval); `pinned`: the
    documents it serves from the bytes the gate hashed, by URI."""
    return CustodyStorage._issue(_ISSUE, config, objects, pinned)
