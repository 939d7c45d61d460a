"""One backend per store, made on first use in each process and dropped after a failure."""

from __future__ import annotations

import threading

from trainvault.storage.backend import Backend
from trainvault.storage.config import StorageConfig
from trainvault.storage.local import FileBackend
from trainvault.storage.objectstore import claim_obstore, memory_backend, s3_backend
from trainvault.uris import Location


class Clients:
    """The backends a `Storage` reads and writes through, keyed by (scheme, bucket)."""

    def __init__(self, config: StorageConfig):
        self.config = config
        self._backends: dict[tuple[str, str], Backend] = {}
        self._lock = threading.Lock()

    def get(self, loc: Location) -> Backend:
        """The cached backend for `loc`'s store (made now if there is none)."""
        if loc.scheme != "file":
            claim_obstore(loc.uri)
        key = (loc.scheme, loc.bucket)
        backend = self._backends.get(key)
        if backend is None:
            with self._lock:
                backend = self._backends.get(key)
                if backend is None:
                    backend = self._backends[key] = self._make(loc)
        return backend

    def drop(self, loc: Location) -> None:
        """Forget the client so the next attempt opens a fresh one (a broken pool is discarded)."""
        with self._lock:
            self._backends.pop((loc.scheme, loc.bucket), None)

    def _make(self, loc: Location) -> Backend:
        if loc.scheme == "file":
            return FileBackend()
        if loc.scheme == "memory":
            return memory_backend(loc.bucket)
        return s3_backend(self.config, loc)
