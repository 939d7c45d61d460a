"""Object storage: URIs to obstore stores, and the few operations trainvault needs.

A URI's scheme picks the store: ``s3://bucket/key`` (any S3-compatible service; endpoint,
region and keys from `StorageConfig`), ``file:///abs/path`` or a plain path (the local
folder store), ``memory://name/key`` (an in-process store, for tests and examples).

Publication writes are create-only (``If-None-Match: *``): an object, once written, never
changes. Writing the same bytes again is a no-op; different bytes are a `ConflictError`.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import stat
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import unquote, urlsplit

import obstore
import obstore.exceptions as obx
from obstore.store import MemoryStore, S3Store

from trainvault.errors import (
    AuthenticationError,
    IntegrityError,
    ConflictError,
    ObjectNotFoundError,
    ObjectTooLargeError,
    StorageError,
    StorageTimeoutError,
    TrainVaultError,
    TransientStorageError,
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
    #: Retries inside one client call (obstore's own, short on purpose).
    client_retries: int = 3
    client_retry_timeout_s: float = 60.0
    #: trainvault's recovery: retry with a fresh client until this long passes without progress.
    recovery_window_s: float = 900.0
    backoff_initial_s: float = 0.2
    backoff_max_s: float = 15.0
    #: The largest JSON document (manifest, descriptor, request, ...) trainvault reads.
    max_document_bytes: int = 64 << 20

    def __repr__(self) -> str:
        hidden = "***" if self.access_key_id or self.secret_access_key else None
        return (
            f"StorageConfig(s3_base_url={self.s3_base_url!r}, region={self.region!r}, "
            f"credentials={hidden!r}, connect_timeout_s={self.connect_timeout_s}, "
            f"read_timeout_s={self.read_timeout_s}, request_timeout_s={self.request_timeout_s}, "
            f"recovery_window_s={self.recovery_window_s})"
        )

    def with_overrides(self, **changes: Any) -> StorageConfig:
        return replace(self, **changes)


@dataclass(frozen=True)
class ObjectInfo:
    uri: str
    size: int
    etag: str | None
    #: When the store last wrote the object (UTC); filled by `Storage.list`, None from `head`.
    last_modified: datetime | None = None


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


# obstore drives I/O on a tokio runtime whose threads do not survive fork(): a forked
# child that touches obstore after its parent did hangs for ever. We remember which
# process first used it and fail fast, with advice, instead of hanging.
_OBSTORE_PID: int | None = None


def _claim_obstore(uri: str) -> None:
    global _OBSTORE_PID
    pid = os.getpid()
    if _OBSTORE_PID is None:
        _OBSTORE_PID = pid
    elif _OBSTORE_PID != pid:
        raise StorageError(
            f"cannot read {uri} in a process forked after its parent used object storage: the storage "
            "client does not survive fork(). Start workers with the 'spawn' or 'forkserver' multiprocessing "
            "context (DataLoader(multiprocessing_context='forkserver'), "
            "ProcessPoolExecutor(mp_context=multiprocessing.get_context('forkserver'))), or create the pool "
            "before the parent's first storage access"
        )


class _ObstoreBackend:
    """S3 and memory:// through obstore."""

    def __init__(self, store: Any):
        self.store = store

    def get(self, path: str, if_match: str | None = None, limit: int | None = None) -> bytes:
        options = {"if_match": if_match} if if_match else None
        result = obstore.get(self.store, path, options=options)
        # The size is known before the body is read: an oversized object is never downloaded.
        _check_limit(int(result.meta["size"]), limit)
        return result.bytes().to_bytes()

    def get_range(self, path: str, start: int, end: int) -> bytes:
        return obstore.get_range(self.store, path, start=start, end=end).to_bytes()

    def open_stream(
        self, path: str, start: int, end: int | None, chunk_size: int, if_match: str | None, limit: int | None = None
    ) -> tuple[str | None, Iterator[bytes]]:
        options: dict[str, Any] = {}
        if start or end is not None:
            options["range"] = (start, end) if end is not None else {"offset": start}
        if if_match:
            options["if_match"] = if_match
        result = obstore.get(self.store, path, options=options)
        _check_limit(int(result.meta["size"]), limit)
        return result.meta.get("e_tag"), iter(result.stream(min_chunk_size=chunk_size))

    def head(self, path: str) -> tuple[int, str | None]:
        meta = obstore.head(self.store, path)
        return int(meta["size"]), meta.get("e_tag")

    def list(self, prefix: str) -> Iterator[tuple[str, int, str | None, datetime | None]]:
        for batch in obstore.list(self.store, prefix=prefix or None):
            for meta in batch:
                yield meta["path"], int(meta["size"]), meta.get("e_tag"), meta.get("last_modified")

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


def _file_etag(st: os.stat_result) -> str:
    return f"{st.st_ino:x}-{st.st_mtime_ns:x}-{st.st_size:x}"


class _NotRegular(Exception):
    """The path names a FIFO, socket, device or other non-regular file."""

    def __init__(self, kind: str):
        super().__init__(kind)
        self.kind = kind


class _TooLarge(Exception):
    """An object holds more bytes than the read allows (`size` None: found while reading)."""

    def __init__(self, size: int | None, limit: int):
        super().__init__(size, limit)
        self.size, self.limit = size, limit


def _check_limit(size: int, limit: int | None) -> None:
    if limit is not None and size > limit:
        raise _TooLarge(size, limit)


def _kind(mode: int) -> str:
    for test, kind in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return kind
    return "a special file"


def _check_regular(path: str, st: os.stat_result) -> None:
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
    if not stat.S_ISREG(st.st_mode):
        raise _NotRegular(_kind(st.st_mode))


def _open_regular(path: str) -> tuple[int, os.stat_result]:
    """Open a regular file (symlinks followed) for reading, with the status of what was opened.

    O_NONBLOCK keeps open() of a FIFO from waiting for a writer; regular files ignore it.
    """
    fd = os.open("/" + path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        _check_regular(path, st)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


class _FileBackend:
    """Local folders with plain file I/O: fork-safe, so DataLoader workers may fork freely."""

    _TMP = ".tv-tmp-"

    def get(self, path: str, if_match: str | None = None, limit: int | None = None) -> bytes:
        fd, st = _open_regular(path)
        with open(fd, "rb") as f:
            # The etag of the open file, so a concurrent replacement cannot slip between check and read.
            if if_match and if_match != _file_etag(st):
                raise _ObjectChanged(path)
            _check_limit(st.st_size, limit)
            if limit is None:
                return f.read()
            data = f.read(limit + 1)  # a file that grew since fstat is still read no further
            _check_limit(len(data), limit)
            return data

    def get_range(self, path: str, start: int, end: int) -> bytes:
        fd, _ = _open_regular(path)
        try:
            return os.pread(fd, end - start, start)
        finally:
            os.close(fd)

    def open_stream(
        self, path: str, start: int, end: int | None, chunk_size: int, if_match: str | None, limit: int | None = None
    ) -> tuple[str | None, Iterator[bytes]]:
        fd, st = _open_regular(path)
        f = open(fd, "rb")  # noqa: SIM115 - closed by the generator
        etag = _file_etag(st)
        if if_match and if_match != etag:
            f.close()
            raise _ObjectChanged(path)
        if limit is not None and st.st_size > limit:
            f.close()
            raise _TooLarge(st.st_size, limit)

        def chunks() -> Iterator[bytes]:
            with f:
                f.seek(start)
                remaining = None if end is None else end - start
                while remaining is None or remaining > 0:
                    chunk = f.read(chunk_size if remaining is None else min(chunk_size, remaining))
                    if not chunk:
                        return
                    if remaining is not None:
                        remaining -= len(chunk)
                    yield chunk

        return etag, chunks()

    def head(self, path: str) -> tuple[int, str | None]:
        st = os.stat("/" + path)
        if stat.S_ISDIR(st.st_mode):
            raise FileNotFoundError(path)
        _check_regular(path, st)
        return st.st_size, _file_etag(st)

    def list(self, prefix: str) -> Iterator[tuple[str, int, str | None, datetime | None]]:
        top = "/" + prefix
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames.sort()
            for name in sorted(filenames):
                if name.startswith(self._TMP):
                    continue  # an interrupted write's leftovers are not objects
                full = os.path.join(dirpath, name)
                st = os.stat(full)
                yield (
                    full.lstrip("/"),
                    st.st_size,
                    _file_etag(st),
                    datetime.fromtimestamp(st.st_mtime, tz=timezone.utc),
                )

    def _write_tmp(self, path: str, data: Any) -> str:
        folder, name = os.path.split("/" + path)
        os.makedirs(folder, exist_ok=True)
        tmp = os.path.join(folder, f"{self._TMP}{name}.{os.getpid()}.{threading.get_ident()}")
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        return tmp

    def put(self, path: str, data: Any) -> str | None:
        tmp = self._write_tmp(path, data)
        os.replace(tmp, "/" + path)
        return self.head(path)[1]

    def create(self, path: str, data: Any) -> bool:
        # link() is atomic and fails if the name exists: readers never see a partial object.
        tmp = self._write_tmp(path, data)
        try:
            os.link(tmp, "/" + path)
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)
        return True

    def delete(self, path: str) -> None:
        os.unlink("/" + path)


class Storage:
    """Reads and writes objects by URI with trainvault's timeouts and error types.

    Picklable: clients are created lazily per process and never pickled.
    """

    def __init__(self, config: StorageConfig | None = None):
        self.config = config or StorageConfig()
        self._backends: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {"config": self.config}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["config"])

    def __repr__(self) -> str:
        return f"Storage({self.config!r})"

    # -- backends ---------------------------------------------------------------

    def _backend(self, loc: Location) -> Any:
        if loc.scheme != "file":
            _claim_obstore(loc.uri)
        key = (loc.scheme, loc.bucket)
        backend = self._backends.get(key)
        if backend is None:
            with self._lock:
                backend = self._backends.get(key)
                if backend is None:
                    backend = self._make_backend(loc)
                    self._backends[key] = backend
        return backend

    def _make_backend(self, loc: Location) -> Any:
        if loc.scheme == "file":
            return _FileBackend()
        if loc.scheme == "memory":
            with _MEMORY_LOCK:
                return _ObstoreBackend(_MEMORY_STORES.setdefault(loc.bucket, MemoryStore()))
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
                "max_retries": cfg.client_retries,
                "retry_timeout": _timedelta(cfg.client_retry_timeout_s),
                "backoff": {
                    "init_backoff": _timedelta(cfg.backoff_initial_s),
                    "max_backoff": _timedelta(cfg.backoff_max_s),
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
        return _ObstoreBackend(S3Store(loc.bucket, **kwargs))

    def _drop_backend(self, loc: Location) -> None:
        """Forget the client so the next attempt opens a fresh one (a broken pool is discarded)."""
        with self._lock:
            self._backends.pop((loc.scheme, loc.bucket), None)

    def _pause_or_give_up(
        self, loc: Location, op: str, exc: BaseException, since: float, attempt: int, offset: int | None = None
    ) -> None:
        """Back off before the next attempt, or raise once the recovery window has passed without progress."""
        cfg = self.config
        idle = time.monotonic() - since
        reason = _first_line(exc.__cause__ or exc)
        if idle >= cfg.recovery_window_s:
            STATS.add("gave_up")
            where = f" at byte {offset}" if offset is not None else ""
            raise StorageTimeoutError(
                f"cannot {op} {loc.uri}{where}: no progress for {idle:.0f} s (recovery window "
                f"{cfg.recovery_window_s:.0f} s); last error: {reason}. Check the network and the store"
            ) from exc
        delay = min(cfg.backoff_max_s, cfg.backoff_initial_s * 2 ** min(attempt - 1, 16), cfg.recovery_window_s - idle)
        if offset is not None:
            STATS.add("resumes")
            log.info("resuming %s at byte %d in %.1f s (attempt %d): %s", loc.uri, offset, delay, attempt, reason)
        else:
            STATS.add("retries")
            log.info("retrying %s %s in %.1f s (attempt %d): %s", op, loc.uri, delay, attempt, reason)
        time.sleep(max(delay, 0.0))
        self._drop_backend(loc)

    def _recovering(self, uri: str, op: str, fn: Any) -> Any:
        """Run ``fn(backend, path, location)``, retrying transient failures with a fresh client."""
        loc = parse_uri(uri)
        since = time.monotonic()
        attempt = 0
        while True:
            backend = self._backend(loc)
            try:
                with _translate(loc.uri, op):
                    return fn(backend, loc.path, loc)
            except TransientStorageError as exc:
                attempt += 1
                self._pause_or_give_up(loc, op, exc, since, attempt)

    # -- reads ------------------------------------------------------------------

    def get(
        self, uri: str, *, if_match: str | None = None, max_bytes: int | None = None, expected_size: int | None = None
    ) -> bytes:
        """The whole object; with `if_match`, only the version with that etag (else `IntegrityError`).

        `max_bytes`: an object larger than this raises `ObjectTooLargeError`, and is not read.
        `expected_size`: the size that binds the object; any other size raises `IntegrityError`,
        and no more than that many bytes are read.
        """
        limit = _read_limit(max_bytes, expected_size)
        try:
            data = self._recovering(uri, "read", lambda b, path, loc: b.get(path, if_match, limit))
        except _TooLarge as exc:
            raise _size_error(normalize_uri(uri), exc, expected_size) from None
        if expected_size is not None and len(data) != expected_size:
            raise _size_error(normalize_uri(uri), _TooLarge(len(data), expected_size), expected_size)
        return data

    def get_document(self, uri: str, *, if_match: str | None = None) -> bytes:
        """A JSON document's bytes: `get` refusing objects above `StorageConfig.max_document_bytes`."""
        return self.get(uri, if_match=if_match, max_bytes=self.config.max_document_bytes)

    def get_range(self, uri: str, start: int, end: int) -> bytes:
        """Bytes [start, end) of the object; `IntegrityError` if the object is shorter."""
        if end <= start:
            return b""
        data = self._recovering(uri, f"read bytes {start}-{end} of", lambda b, path, loc: b.get_range(path, start, end))
        if len(data) != end - start:
            raise IntegrityError(
                f"{normalize_uri(uri)}: asked for bytes {start}-{end} but got {len(data)}; the object is shorter "
                "than its index says (truncated)"
            )
        return data

    def stream(
        self,
        uri: str,
        *,
        start: int = 0,
        end: int | None = None,
        chunk_size: int = 8 << 20,
        max_bytes: int | None = None,
        expected_size: int | None = None,
    ) -> Iterator[bytes]:
        """Stream bytes [start, end) (to the end of the object when `end` is None).

        `max_bytes` and `expected_size` bound the object as in `get`; a stream stops with
        the error as soon as the object is seen to break them.

        Survives resets, stalls and cut bodies: each failure reopens a fresh client and
        resumes at the last byte delivered, pinned to the object's etag, so two versions of
        an object are never spliced (a replaced object raises `IntegrityError`). Gives up
        with `StorageTimeoutError` after the recovery window passes without progress.
        """
        loc = parse_uri(uri)
        limit = _read_limit(max_bytes, expected_size)
        pos, etag, chunks = start, None, None
        since, attempt = time.monotonic(), 0
        while end is None or pos < end:
            try:
                with _translate(loc.uri, "stream"):
                    if chunks is None:
                        got, chunks = self._backend(loc).open_stream(loc.path, pos, end, chunk_size, etag, limit)
                        etag = etag or got
                    chunk = next(chunks, None)
            except TransientStorageError as exc:
                chunks = None
                attempt += 1
                self._pause_or_give_up(loc, "stream", exc, since, attempt, offset=pos)
                continue
            except _TooLarge as exc:
                raise _size_error(loc.uri, exc, expected_size) from None
            if chunk is None:
                break
            pos += len(chunk)
            if limit is not None and pos > limit:  # it grew after it was opened
                raise _size_error(loc.uri, _TooLarge(None, limit), expected_size)
            since, attempt = time.monotonic(), 0
            yield chunk
        if end is not None and pos < end:
            raise IntegrityError(f"{loc.uri}: ended at byte {pos}, expected {end}; the object is truncated")
        if end is None and expected_size is not None and pos != expected_size:
            raise _size_error(loc.uri, _TooLarge(pos, expected_size), expected_size)

    def head(self, uri: str) -> ObjectInfo:
        size, etag = self._recovering(uri, "inspect", lambda b, path, loc: b.head(path))
        return ObjectInfo(normalize_uri(uri), size, etag)

    def exists(self, uri: str) -> bool:
        try:
            self.head(uri)
        except ObjectNotFoundError:
            return False
        return True

    def list(self, prefix_uri: str) -> list[ObjectInfo]:
        """Every object under the folder `prefix_uri`, sorted by URI."""

        def run(backend: Any, path: str, loc: Location) -> list[ObjectInfo]:
            try:
                return [
                    ObjectInfo(replace(loc, path=p).uri, size, etag, modified)
                    for p, size, etag, modified in backend.list(path.rstrip("/"))
                ]
            except FileNotFoundError:
                return []  # a folder that does not exist yet holds nothing

        return sorted(self._recovering(prefix_uri, "list", run), key=lambda o: o.uri)

    # -- writes -----------------------------------------------------------------

    def put(self, uri: str, data: bytes) -> ObjectInfo:
        """Write (or overwrite) an object. Publications use `put_create` instead."""
        etag = self._recovering(uri, "write", lambda b, path, loc: b.put(path, data))
        return ObjectInfo(normalize_uri(uri), len(data), etag)

    def put_create(self, uri: str, data: bytes | bytearray | memoryview) -> bool:
        """Create `uri` with `data` unless it exists. True when this call created it.

        An existing object with identical bytes counts as success: a repeated publication,
        or our own earlier attempt whose response was lost. Different bytes raise
        `ConflictError`.
        """
        size = len(data)
        if size > SINGLE_PUT_LIMIT:
            raise ObjectTooLargeError(
                f"{uri}: {size} bytes exceeds the 5 GiB limit of a create-only write; "
                "split the data over more shard ids"
            )
        if self._recovering(uri, "create", lambda b, path, loc: b.create(path, data)):
            return True
        try:
            existing = self.get(uri)
        except ObjectNotFoundError:
            raise StorageError(f"{uri}: the store reported the object exists, then could not find it; retry") from None
        if existing != bytes(data):
            raise ConflictError(
                f"{normalize_uri(uri)} already exists with different content ({len(existing)} bytes, not {size}); "
                "published objects are immutable: write to a new location"
            )
        return False

    def delete(self, uri: str) -> None:
        """Delete an object; deleting a missing object is not an error."""

        def run(backend: Any, path: str, loc: Location) -> None:
            try:
                backend.delete(path)
            except FileNotFoundError:
                pass

        self._recovering(uri, "delete", run)


class _ObjectChanged(Exception):
    """The object's etag no longer matches the one a read was pinned to."""


def _read_limit(max_bytes: int | None, expected_size: int | None) -> int | None:
    limits = [n for n in (max_bytes, expected_size) if n is not None]
    return min(limits) if limits else None


def _size_error(uri: str, exc: _TooLarge, expected_size: int | None) -> TrainVaultError:
    """`IntegrityError` for an object whose binding gives another size, else `ObjectTooLargeError`."""
    found = f"{exc.size} bytes" if exc.size is not None else f"more than {exc.limit} bytes"
    if expected_size is not None and exc.limit == expected_size:
        return IntegrityError(
            f"{uri} is {found}, but it is bound as {expected_size} bytes; it was truncated, extended or replaced "
            "after it was bound: nothing from it is used"
        )
    return ObjectTooLargeError(
        f"{uri} is {found}, over the {exc.limit}-byte limit of this read; refusing to read it. If it is a "
        "legitimate document, raise StorageConfig.max_document_bytes"
    )


class StorageStats:
    """Process-wide counts of recoveries, so a person can see a flaky link."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {"retries": 0, "resumes": 0, "gave_up": 0}

    def add(self, name: str) -> None:
        with self._lock:
            self._counts[name] += 1

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)


STATS = StorageStats()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


class _translate:
    """Turn obstore and OS errors into trainvault errors that name the object."""

    def __init__(self, uri: str, op: str):
        self.uri, self.op = uri, op

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool:
        if exc is None or isinstance(exc, (StorageError, IntegrityError, GeneratorExit, StopIteration)):
            return False
        if isinstance(exc, FileNotFoundError):
            raise ObjectNotFoundError(f"{self.uri} does not exist") from exc
        if isinstance(exc, _NotRegular):
            raise StorageError(
                f"cannot {self.op} {self.uri}: it is {exc.kind}, not a regular file; trainvault reads only regular "
                "files: put the published object back"
            ) from None
        if isinstance(exc, (IsADirectoryError, NotADirectoryError)):
            raise ObjectNotFoundError(f"{self.uri} is a folder (or lies under a file), not an object; name the object") from exc
        if isinstance(exc, (obx.PermissionDeniedError, obx.UnauthenticatedError, PermissionError)):
            raise AuthenticationError(
                f"cannot {self.op} {self.uri}: access denied; check the storage credentials and permissions"
            ) from exc
        if isinstance(exc, (obx.PreconditionError, _ObjectChanged)):
            raise IntegrityError(
                f"{self.uri} changed while it was being read; refusing to mix two versions of it: "
                "published objects must not be replaced"
            ) from exc
        if isinstance(exc, obx.GenericError):
            text = str(exc)
            # Not a bare "416": it also appears inside timings such as "in 16.416158ms".
            if re.search(r"status code: 416\b", text) or "Range Not Satisfiable" in text or "InvalidRange" in text:
                raise IntegrityError(f"cannot {self.op} {self.uri}: the object is shorter than expected (truncated)") from exc
            # Network failures, timeouts and 5xx after obstore's own retries: worth a fresh attempt.
            raise TransientStorageError(f"cannot {self.op} {self.uri}: {_first_line(exc)}") from exc
        if isinstance(exc, obx.BaseError):
            raise StorageError(f"cannot {self.op} {self.uri}: {_first_line(exc)}") from exc
        if isinstance(exc, OSError):
            # A symlink loop (ELOOP), a socket (ENXIO), an I/O error: never a raw OSError.
            hint = _OS_HINTS.get(exc.errno, "")
            raise StorageError(f"cannot {self.op} {self.uri}: {exc.strerror or exc}{hint}") from exc
        return False


_OS_HINTS = {
    errno.ELOOP: " (a symlink loop); an object must be a regular file: put the published object back",
    errno.ENXIO: " (a socket or device, not a regular file); put the published object back",
}
