"""Object storage: URIs to obstore stores, and the few operations trainvault needs.

A URI's scheme picks the store: ``s3://bucket/key`` (any S3-compatible service; endpoint,
region and keys from `StorageConfig`), ``file:///abs/path`` or a plain path (the local
folder store), ``memory://name/key`` (an in-process store, for tests and examples).

Publication writes are create-only (``If-None-Match: *``): an object, once written, never
changes. Writing the same bytes again is a no-op; different bytes are a `ConflictError`.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any
from urllib.parse import unquote, urlsplit

import obstore
import obstore.exceptions as obx
from obstore.store import LocalStore, MemoryStore, S3Store

from trainvault.errors import (
    AuthenticationError,
    ConflictError,
    ObjectNotFoundError,
    ObjectTooLargeError,
    StorageError,
    StorageTimeoutError,
)

log = logging.getLogger(__name__)

#: S3 refuses a single PUT above 5 GiB, and create-only writes are always single PUTs.
SINGLE_PUT_LIMIT = 5 * 1024**3

_MEMORY_STORES: dict[str, MemoryStore] = {}
_MEMORY_LOCK = threading.Lock()


@dataclass(frozen=True)
class StorageConfig:
    """Endpoint, credentials and time limits for object storage.

    Holds configuration only (no clients), so it pickles into worker processes.
    Credentials never appear in its repr.
    """

    s3_base_url: str | None = None
    region: str | None = None
    access_key_id: str | None = field(default=None, repr=False)
    secret_access_key: str | None = field(default=None, repr=False)
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 60.0
    request_timeout_s: float = 600.0
    max_retries: int = 8
    retry_window_s: float = 900.0

    def __repr__(self) -> str:
        hidden = "***" if self.access_key_id or self.secret_access_key else None
        return (
            f"StorageConfig(s3_base_url={self.s3_base_url!r}, region={self.region!r}, "
            f"credentials={hidden!r}, connect_timeout_s={self.connect_timeout_s}, "
            f"read_timeout_s={self.read_timeout_s}, request_timeout_s={self.request_timeout_s})"
        )

    def with_overrides(self, **changes: Any) -> StorageConfig:
        return replace(self, **changes)


@dataclass(frozen=True)
class ObjectInfo:
    uri: str
    size: int
    etag: str | None


@dataclass(frozen=True)
class Location:
    """A parsed URI: which store, and the path inside it."""

    scheme: str  # "s3" | "file" | "memory"
    bucket: str  # bucket, memory store name, or "" for local
    path: str  # key inside the store, no leading slash

    @property
    def uri(self) -> str:
        if self.scheme == "file":
            return "file:///" + self.path
        return f"{self.scheme}://{self.bucket}/{self.path}"


def parse_uri(uri: str) -> Location:
    """Parse a storage URI or plain local path; relative paths become absolute."""
    if not isinstance(uri, str) or not uri:
        raise StorageError(f"not a storage URI: {uri!r}; use s3://bucket/key, file:///path or memory://name/key")
    if "://" not in uri:
        return Location("file", "", os.path.abspath(uri).lstrip("/"))
    parts = urlsplit(uri)
    scheme = parts.scheme.lower()
    if scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise StorageError(f"{uri}: file URIs must be absolute (file:///abs/path)")
        return Location("file", "", os.path.normpath(unquote(parts.path)).lstrip("/"))
    if scheme in ("s3", "memory"):
        path = parts.path.lstrip("/")
        if scheme == "s3" and not parts.netloc:
            raise StorageError(f"{uri}: an s3 URI needs a bucket (s3://bucket/key)")
        return Location(scheme, parts.netloc, path)
    raise StorageError(f"{uri}: unsupported scheme {scheme!r}; use s3://, file:// or a local path, or memory://")


def normalize_uri(uri: str) -> str:
    """The canonical spelling of a URI (plain paths become file:///...)."""
    return parse_uri(uri).uri


def join_uri(base: str, *parts: str) -> str:
    """Join path segments onto a folder URI."""
    loc = parse_uri(base)
    segs = [p.strip("/") for p in (loc.path, *parts) if p and p.strip("/")]
    return replace(loc, path="/".join(segs)).uri


def parent_uri(uri: str) -> str:
    """The folder that holds an object."""
    loc = parse_uri(uri)
    return replace(loc, path=loc.path.rsplit("/", 1)[0] if "/" in loc.path else "").uri


def is_within(uri: str, root: str) -> bool:
    """True when `uri` names an object inside the folder `root` (same store)."""
    a, b = parse_uri(uri), parse_uri(root)
    if (a.scheme, a.bucket) != (b.scheme, b.bucket):
        return False
    prefix = b.path.rstrip("/")
    return not prefix or a.path.startswith(prefix + "/")


def _timedelta(seconds: float) -> timedelta:
    return timedelta(seconds=seconds)


class Storage:
    """Reads and writes objects by URI with trainvault's timeouts and error types.

    Picklable: clients are created lazily per process and never pickled.
    """

    def __init__(self, config: StorageConfig | None = None):
        self.config = config or StorageConfig()
        self._stores: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {"config": self.config}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["config"])

    def __repr__(self) -> str:
        return f"Storage({self.config!r})"

    # -- stores -----------------------------------------------------------------

    def _store(self, loc: Location) -> Any:
        key = (loc.scheme, loc.bucket)
        store = self._stores.get(key)
        if store is None:
            with self._lock:
                store = self._stores.get(key)
                if store is None:
                    store = self._make_store(loc)
                    self._stores[key] = store
        return store

    def _make_store(self, loc: Location) -> Any:
        if loc.scheme == "memory":
            with _MEMORY_LOCK:
                return _MEMORY_STORES.setdefault(loc.bucket, MemoryStore())
        if loc.scheme == "file":
            return LocalStore("/", mkdir=True)
        cfg = self.config
        client_options: dict[str, Any] = {
            "connect_timeout": _timedelta(cfg.connect_timeout_s),
            "read_timeout": _timedelta(cfg.read_timeout_s),
            "timeout": _timedelta(cfg.request_timeout_s),
        }
        if cfg.s3_base_url and cfg.s3_base_url.startswith("http://"):
            client_options["allow_http"] = True
        kwargs: dict[str, Any] = {
            "client_options": client_options,
            "retry_config": {
                "max_retries": cfg.max_retries,
                "retry_timeout": _timedelta(cfg.retry_window_s),
                "backoff": {
                    "init_backoff": timedelta(milliseconds=100),
                    "max_backoff": timedelta(seconds=15),
                    "base": 2,
                },
            },
            "virtual_hosted_style_request": False,
        }
        if cfg.s3_base_url:
            kwargs["endpoint"] = cfg.s3_base_url
        if cfg.region:
            kwargs["region"] = cfg.region
        if cfg.access_key_id:
            kwargs["access_key_id"] = cfg.access_key_id
        if cfg.secret_access_key:
            kwargs["secret_access_key"] = cfg.secret_access_key
        return S3Store(loc.bucket, **kwargs)

    def _resolve(self, uri: str) -> tuple[Any, str, Location]:
        loc = parse_uri(uri)
        return self._store(loc), loc.path, loc

    # -- reads ------------------------------------------------------------------

    def get(self, uri: str) -> bytes:
        """The whole object."""
        store, path, loc = self._resolve(uri)
        with _translate(loc.uri, "read"):
            return obstore.get(store, path).bytes().to_bytes()

    def get_range(self, uri: str, start: int, end: int) -> bytes:
        """Bytes [start, end) of the object."""
        if end <= start:
            return b""
        store, path, loc = self._resolve(uri)
        with _translate(loc.uri, f"read bytes {start}-{end} of"):
            data = obstore.get_range(store, path, start=start, end=end).to_bytes()
        if len(data) != end - start:
            from trainvault.errors import IntegrityError

            raise IntegrityError(
                f"{loc.uri}: asked for bytes {start}-{end} but got {len(data)} bytes; the object is shorter than its index says"
            )
        return data

    def stream(
        self, uri: str, *, start: int = 0, end: int | None = None, chunk_size: int = 8 << 20
    ) -> Iterator[bytes]:
        """Stream bytes [start, end) (to the end of the object when `end` is None)."""
        store, path, loc = self._resolve(uri)
        options: dict[str, Any] = {}
        if start or end is not None:
            options["range"] = (start, end) if end is not None else {"offset": start}
        with _translate(loc.uri, "stream"):
            result = obstore.get(store, path, options=options)
            for chunk in result.stream(min_chunk_size=chunk_size):
                yield chunk

    def head(self, uri: str) -> ObjectInfo:
        store, path, loc = self._resolve(uri)
        with _translate(loc.uri, "inspect"):
            meta = obstore.head(store, path)
        return ObjectInfo(loc.uri, int(meta["size"]), meta.get("e_tag"))

    def exists(self, uri: str) -> bool:
        try:
            self.head(uri)
        except ObjectNotFoundError:
            return False
        return True

    def list(self, prefix_uri: str) -> list[ObjectInfo]:
        """Every object under the folder `prefix_uri`, sorted by URI."""
        store, path, loc = self._resolve(prefix_uri)
        out: list[ObjectInfo] = []
        with _translate(loc.uri, "list"):
            try:
                for batch in obstore.list(store, prefix=path.rstrip("/") or None):
                    for meta in batch:
                        out.append(
                            ObjectInfo(replace(loc, path=meta["path"]).uri, int(meta["size"]), meta.get("e_tag"))
                        )
            except FileNotFoundError:
                return []  # a local folder that does not exist yet holds nothing
        return sorted(out, key=lambda o: o.uri)

    # -- writes -----------------------------------------------------------------

    def put(self, uri: str, data: bytes) -> ObjectInfo:
        """Write (or overwrite) an object. Publications use `put_create` instead."""
        store, path, loc = self._resolve(uri)
        with _translate(loc.uri, "write"):
            res = obstore.put(store, path, data)
        return ObjectInfo(loc.uri, len(data), res.get("e_tag"))

    def put_create(self, uri: str, data: bytes | bytearray | memoryview) -> bool:
        """Create `uri` with `data` unless it exists. True when this call created it.

        An existing object with identical bytes counts as success (a retried or repeated
        publication); different bytes raise `ConflictError`.
        """
        size = len(data)
        if size > SINGLE_PUT_LIMIT:
            raise ObjectTooLargeError(
                f"{uri}: {size} bytes exceeds the 5 GiB limit of a create-only write; "
                "split the data over more shard ids"
            )
        store, path, loc = self._resolve(uri)
        try:
            with _translate(loc.uri, "create"):
                try:
                    obstore.put(store, path, data, mode="create")
                    return True
                except obx.AlreadyExistsError:
                    pass
            existing = self.get(loc.uri)
        except ObjectNotFoundError:
            raise StorageError(f"{loc.uri}: the store reported the object exists, then could not find it; retry") from None
        if existing != bytes(data):
            raise ConflictError(
                f"{loc.uri} already exists with different content ({len(existing)} bytes, not {size}); "
                "published objects are immutable: write to a new location"
            )
        return False

    def delete(self, uri: str) -> None:
        store, path, loc = self._resolve(uri)
        with _translate(loc.uri, "delete"):
            try:
                obstore.delete(store, path)
            except FileNotFoundError:
                pass  # LocalStore alone reports this; S3 and memory are silent


class _translate:
    """Turn obstore and OS errors into trainvault errors that name the object."""

    def __init__(self, uri: str, op: str):
        self.uri, self.op = uri, op

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool:
        if exc is None or isinstance(exc, (StorageError, GeneratorExit)):
            return False
        if isinstance(exc, FileNotFoundError):
            raise ObjectNotFoundError(f"{self.uri} does not exist") from exc
        if isinstance(exc, (obx.PermissionDeniedError, obx.UnauthenticatedError, PermissionError)):
            raise AuthenticationError(
                f"cannot {self.op} {self.uri}: access denied; check the storage credentials and permissions"
            ) from exc
        if isinstance(exc, obx.BaseError):
            text = str(exc)
            if "Timeout" in text or "TimedOut" in text:
                raise StorageTimeoutError(f"{self.op} {self.uri} timed out; check the network or raise the timeouts") from exc
            first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
            raise StorageError(f"cannot {self.op} {self.uri}: {first}") from exc
        return False
