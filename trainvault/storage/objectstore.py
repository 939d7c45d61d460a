"""The obstore backend: S3 (any S3-compatible service) and in-process memory:// stores.

obstore drives I/O on a tokio runtime whose threads do not survive fork(): a forked child
that touches obstore after its parent did hangs for ever, so `claim_obstore` fails fast,
with advice, instead.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import obstore
import obstore.exceptions as obx
from obstore.store import MemoryStore, S3Store

from trainvault.errors import StorageError
from trainvault.storage.backend import OpenedStream, StoredObject, check_limit
from trainvault.storage.config import StorageConfig, check_s3_values, require_s3_settings
from trainvault.uris import Location

if TYPE_CHECKING:
    # obstore declares its request options in its stubs only.
    from obstore import GetOptions

_MEMORY_STORES: dict[str, MemoryStore] = {}
_MEMORY_LOCK = threading.Lock()

#: The process that first used obstore; no other process may (see the module docstring).
_OBSTORE_PID: int | None = None


class ObstoreBackend:
    """One obstore store (an S3 bucket or a memory:// store)."""

    def __init__(self, store: Any):
        self.store = store

    def get(self, path: str, if_match: str | None = None, limit: int | None = None) -> bytes:
        options: GetOptions | None = {"if_match": if_match} if if_match else None
        result = obstore.get(self.store, path, options=options)
        # The size is known before the body is read: an oversized object is never downloaded.
        check_limit(int(result.meta["size"]), limit)
        return result.bytes().to_bytes()

    def get_range(self, path: str, start: int, end: int) -> bytes:
        # The store answers a range past the end with what the object holds, or an error.
        return obstore.get_range(self.store, path, start=start, end=end).to_bytes()

    def get_ranges(self, path: str, ranges: Sequence[tuple[int, int]]) -> list[Any]:
        # obstore's Bytes: buffers owned by Rust, handed on without a copy.
        return obstore.get_ranges(self.store, path, starts=[a for a, _ in ranges], ends=[b for _, b in ranges])

    def open_stream(
        self, path: str, start: int, end: int | None, chunk_size: int, if_match: str | None, limit: int | None = None
    ) -> OpenedStream:
        options: GetOptions = {}
        if start or end is not None:
            options["range"] = (start, end) if end is not None else {"offset": start}
        if if_match:
            options["if_match"] = if_match
        result = obstore.get(self.store, path, options=options)
        check_limit(int(result.meta["size"]), limit)
        return OpenedStream(result.meta.get("e_tag"), iter(result.stream(min_chunk_size=chunk_size)))

    def head(self, path: str) -> StoredObject:
        meta = obstore.head(self.store, path)
        return StoredObject(path, int(meta["size"]), meta.get("e_tag"))

    def list(self, prefix: str) -> Iterator[StoredObject]:
        for batch in obstore.list(self.store, prefix=prefix or None):
            for meta in batch:
                yield StoredObject(meta["path"], int(meta["size"]), meta.get("e_tag"), meta.get("last_modified"))

    def put(self, path: str, data: Any) -> str | None:
        return obstore.put(self.store, path, data).get("e_tag")

    def create(self, path: str, data: Any) -> bool:
        try:
            obstore.put(self.store, path, data, mode="create")
        except obx.AlreadyExistsError:
            return False
        return True

    def delete(self, path: str) -> None:
        obstore.delete(self.store, path)


def claim_obstore(uri: str) -> None:
    """Note this process as obstore's user; raise if another process already was (a fork)."""
    global _OBSTORE_PID
    pid = os.getpid()
    if _OBSTORE_PID is None:
        _OBSTORE_PID = pid
    elif pid != _OBSTORE_PID:
        raise StorageError(
            f"cannot read {uri} in a process forked after its parent used object storage: the storage "
            "client does not survive fork(). Start workers with the 'spawn' or 'forkserver' multiprocessing "
            "context (DataLoader(multiprocessing_context='forkserver'), "
            "ProcessPoolExecutor(mp_context=multiprocessing.get_context('forkserver'))), or create the pool "
            "before the parent's first storage access"
        )


def memory_backend(name: str) -> ObstoreBackend:
    """The process's memory:// store `name` (created empty on first use)."""
    with _MEMORY_LOCK:
        return ObstoreBackend(_MEMORY_STORES.setdefault(name, MemoryStore()))


def s3_backend(cfg: StorageConfig, loc: Location) -> ObstoreBackend:
    """A client for `loc`'s bucket with `cfg`'s endpoint, keys, timeouts and retries."""
    require_s3_settings(cfg, loc.uri)
    check_s3_values(cfg, loc)
    client_options: dict[str, Any] = {
        "connect_timeout": _seconds(cfg.connect_timeout_s),
        "read_timeout": _seconds(cfg.read_timeout_s),
        "timeout": _seconds(cfg.request_timeout_s),
    }
    if cfg.s3_base_url and cfg.s3_base_url.startswith("http://"):
        client_options["allow_http"] = True
    retry_config = {
        "max_retries": cfg.client_retries,
        "retry_timeout": _seconds(cfg.client_retry_timeout_s),
        "backoff": {
            "init_backoff": _seconds(cfg.backoff_initial_s),
            "max_backoff": _seconds(cfg.backoff_max_s),
            "base": 2,
        },
    }
    kwargs: dict[str, Any] = {
        "client_options": client_options,
        "retry_config": retry_config,
        "virtual_hosted_style_request": False,
        "endpoint": cfg.s3_base_url,
        "access_key_id": cfg.access_key_id,
        "secret_access_key": cfg.secret_access_key,
    }
    if cfg.region:
        kwargs["region"] = cfg.region
    return ObstoreBackend(S3Store(loc.bucket, **kwargs))


def _seconds(seconds: float) -> timedelta:
    return timedelta(seconds=seconds)
