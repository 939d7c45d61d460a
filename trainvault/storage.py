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
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any, Protocol
from urllib.parse import urlsplit

import obstore
import obstore.exceptions as obx
from obstore.store import MemoryStore, S3Store

from trainvault.errors import (
    AuthenticationError,
    ConfigurationError,
    IntegrityError,
    ConflictError,
    ObjectNotFoundError,
    ObjectTooLargeError,
    StorageError,
    StorageTimeoutError,
    TransientStorageError,
    TrainVaultError,
)
# URIs live in the core (trainvault.uris); storage keeps offering them under its own name.
from trainvault.uris import Location, is_within, join_uri, normalize_uri, parent_uri, parse_uri  # noqa: F401

log = logging.getLogger(__name__)

#: S3 refuses a single PUT above 5 GiB, and create-only writes are always single PUTs.
SINGLE_PUT_LIMIT = 5 * 1024**3

_MEMORY_STORES: dict[str, MemoryStore] = {}
_MEMORY_LOCK = threading.Lock()

#: The environment variable behind each S3 setting: read by `StorageConfig.from_env`, the
#: command line and the Dagster resource. Nothing else (no ``AWS_*``) is read for them.
S3_ENV_VARS = {
    "s3_base_url": "TRAINVAULT_S3_URL",
    "region": "TRAINVAULT_S3_REGION",
    "access_key_id": "TRAINVAULT_S3_KEY_ID",
    "secret_access_key": "TRAINVAULT_S3_SECRET",
}


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
    #: Attempts (each with `client_retries`) at an endpoint that has never answered this process:
    #: a wrong or dead endpoint fails in seconds instead of riding out the recovery window.
    first_contact_attempts: int = 2
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

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> StorageConfig:
        """Endpoint, region and keys from the `S3_ENV_VARS` variables (unset or empty: None)."""
        env = os.environ if environ is None else environ
        return cls(**{name: env.get(var) or None for name, var in S3_ENV_VARS.items()})


@dataclass(frozen=True)
class ObjectInfo:
    uri: str
    size: int
    etag: str | None
    #: When the store last wrote the object (UTC); filled by `Storage.list`, None from `head`.
    last_modified: datetime | None = None


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


class _Contacts:
    """Which S3 endpoints have answered, and since when each other one is being tried.

    An endpoint that never answered is most likely wrong or down, so it gets
    `StorageConfig.first_contact_attempts`; one that answered keeps the recovery window,
    because its failures are then most likely transient. "Answered" holds for this process
    and for the processes it hands a pickled `Storage` to (loader and pool workers).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._answered: set[str] = set()
        self._trying: dict[str, float] = {}

    def answered(self, endpoint: str) -> bool:
        return endpoint in self._answered

    def trying(self, endpoint: str) -> None:
        if endpoint not in self._answered:
            with self._lock:
                self._trying.setdefault(endpoint, time.monotonic())

    def heard_from(self, endpoint: str) -> None:
        if endpoint not in self._answered:
            with self._lock:
                self._answered.add(endpoint)
                self._trying.pop(endpoint, None)

    def gave_up(self, endpoint: str) -> None:
        with self._lock:
            self._trying.pop(endpoint, None)

    def waiting(self) -> dict[str, float]:
        """Endpoints being tried that have never answered, with seconds since the first try."""
        now = time.monotonic()
        with self._lock:
            return {endpoint: now - started for endpoint, started in self._trying.items()}


CONTACTS = _Contacts()


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
        """Files under the folder `prefix`; raises OSError for anything but a missing or vanished entry."""

        def unless_gone(exc: OSError) -> None:
            # A folder that does not exist (or vanished mid-walk) holds nothing; any other
            # failure to read one must not pass for an empty folder.
            if not isinstance(exc, (FileNotFoundError, NotADirectoryError)):
                raise exc

        for dirpath, dirnames, filenames in os.walk("/" + prefix, onerror=unless_gone):
            dirnames.sort()
            for name in sorted(filenames):
                if name.startswith(self._TMP):
                    continue  # an interrupted write's leftovers are not objects
                full = os.path.join(dirpath, name)
                try:
                    st = os.stat(full)
                except FileNotFoundError:
                    if os.path.lexists(full):
                        raise  # a link to nothing did not vanish: we cannot say what it holds
                    continue  # deleted between the directory read and the stat: no longer an object
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
        endpoint = self.config.s3_base_url
        return {"config": self.config, "answered": bool(endpoint and CONTACTS.answered(endpoint))}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["config"])
        if state.get("answered") and self.config.s3_base_url:
            CONTACTS.heard_from(self.config.s3_base_url)

    def __repr__(self) -> str:
        return f"Storage({self.config!r})"

    # -- backends ---------------------------------------------------------------

    def _backend(self, loc: Location) -> Any:
        """The cached client for `loc`'s store; called once per attempt, so it notes the attempt."""
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
        if loc.scheme == "s3":
            CONTACTS.trying(self.config.s3_base_url)
        return backend

    def _make_backend(self, loc: Location) -> Any:
        if loc.scheme == "file":
            return _FileBackend()
        if loc.scheme == "memory":
            with _MEMORY_LOCK:
                return _ObstoreBackend(_MEMORY_STORES.setdefault(loc.bucket, MemoryStore()))
        cfg = self.config
        _require_s3_settings(cfg, loc.uri)
        _check_s3_values(cfg, loc)
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
        kwargs["endpoint"] = cfg.s3_base_url
        kwargs["access_key_id"] = cfg.access_key_id
        kwargs["secret_access_key"] = cfg.secret_access_key
        if cfg.region:
            kwargs["region"] = cfg.region
        return _ObstoreBackend(S3Store(loc.bucket, **kwargs))

    def _heard_from(self, loc: Location) -> None:
        if loc.scheme == "s3" and self.config.s3_base_url:
            CONTACTS.heard_from(self.config.s3_base_url)

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
        endpoint = cfg.s3_base_url if loc.scheme == "s3" else None
        if endpoint and not CONTACTS.answered(endpoint) and attempt >= cfg.first_contact_attempts:
            CONTACTS.gave_up(endpoint)
            STATS.add("gave_up")
            raise StorageError(
                f"cannot {op} {loc.uri}: the S3 endpoint {endpoint} did not answer ({attempt} attempts, connect "
                f"timeout {cfg.connect_timeout_s:g} s, {cfg.client_retries} retries each); last error: {reason}. "
                f"Check {S3_ENV_VARS['s3_base_url']} (s3_base_url) and that the service is up and reachable"
            ) from exc
        if idle >= cfg.recovery_window_s:
            if endpoint:
                CONTACTS.gave_up(endpoint)
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
                    result = fn(backend, loc.path, loc)
            except TransientStorageError as exc:
                attempt += 1
                self._pause_or_give_up(loc, op, exc, since, attempt)
                continue
            except TrainVaultError:
                self._heard_from(loc)  # a refusal (missing, denied, changed) is an answer too
                raise
            self._heard_from(loc)
            return result

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
                        self._heard_from(loc)
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
        """Every object under the folder `prefix_uri`, sorted by URI.

        Complete or an error, never less: every object that exists for the whole call is
        listed (a folder that does not exist holds nothing; objects created or deleted
        during the call may or may not appear). Anything else raises a `StorageError`.
        """

        def run(backend: Any, path: str, loc: Location) -> list[ObjectInfo]:
            try:
                return [
                    ObjectInfo(replace(loc, path=p).uri, size, etag, modified)
                    for p, size, etag, modified in backend.list(path.rstrip("/"))
                ]
            except (StorageError, PermissionError):
                raise  # already typed, or made an AuthenticationError by _translate
            except OSError as exc:
                # Never "no objects": a caller such as the rollout collector would take an
                # unreadable folder for an empty one and delete what it protects.
                raise StorageError(f"cannot list {loc.uri}: {exc}; nothing was listed: check the folder and retry") from exc

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


class HoldsStorage(Protocol):
    """Anything that reads through a `Storage` it holds as ``.storage`` (a `TrainVault`)."""

    @property
    def storage(self) -> Storage: ...


#: What a library function that takes a vault accepts: a `TrainVault` or a bare `Storage`.
StorageSource = Storage | HoldsStorage


def storage_of(source: StorageSource) -> Storage:
    """The `Storage` a library function reads through: `source` itself or its ``.storage``, so
    functions taking a vault need not import the facade that calls them."""
    if isinstance(source, Storage):
        return source
    storage = getattr(source, "storage", None)
    if isinstance(storage, Storage):
        return storage
    raise TypeError(f"expected a TrainVault or a Storage, got {type(source).__name__}")


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


def _require_s3_settings(cfg: StorageConfig, uri: str) -> None:
    """Refuse before any network call: without an endpoint and keys, the client would try a
    public cloud endpoint and its credential service (which hang on a closed network)."""
    missing = [
        f"{var} ({name})"
        for name, var in S3_ENV_VARS.items()
        if name != "region" and not getattr(cfg, name)
    ]
    if missing:
        region = "" if cfg.region else f" (and {S3_ENV_VARS['region']} if the service needs a region)"
        raise StorageError(
            f"cannot reach {uri}: S3 storage is not configured: set {', '.join(missing)}{region} in the "
            "environment (read by the command line, the pipeline and TrainVault.from_env()), or pass the "
            "settings to TrainVault(...)"
        )


_S3_DURATIONS = ("connect_timeout_s", "read_timeout_s", "request_timeout_s", "client_retry_timeout_s",
                 "recovery_window_s", "backoff_initial_s", "backoff_max_s")
_S3_COUNTS = {"client_retries": 0, "first_contact_attempts": 1}
#: Longest duration and largest count a setting may hold (the client's own types overflow beyond).
_S3_MAX_SECONDS = 10**9
_S3_MAX_COUNT = 10**6
#: Region and keys travel in request headers: visible ASCII only.
_HEADER_SAFE = re.compile(r"[!-~]+")
_BUCKET = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def _endpoint_problem(url: str | None) -> str | None:
    try:
        parts = urlsplit(url or "")
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        parts, port_ok = None, False
    if parts and port_ok and parts.scheme in ("http", "https") and parts.hostname and _HEADER_SAFE.fullmatch(url or ""):
        return None
    return (f"s3_base_url ({S3_ENV_VARS['s3_base_url']}) must be an http:// or https:// URL with a host (and a port "
            f"in 1..65535), got {url!r}")


def _check_s3_values(cfg: StorageConfig, loc: Location) -> None:
    """Refuse what the S3 client would reject obscurely, or panic on at the first request (an
    endpoint, header or bucket it cannot form), before anything is sent. Keys are never shown."""
    if not _BUCKET.fullmatch(loc.bucket):
        raise StorageError(f"{loc.uri}: bucket {loc.bucket!r} is not an S3 bucket name (letters, digits, '.', '_', '-')")
    problems = [p for p in [_endpoint_problem(cfg.s3_base_url)] if p]
    for name in ("region", "access_key_id", "secret_access_key"):
        value = getattr(cfg, name)
        if value is not None and not (isinstance(value, str) and _HEADER_SAFE.fullmatch(value)):
            shown = f", got {value!r}" if name == "region" else ""
            problems.append(f"{name} ({S3_ENV_VARS[name]}) must be visible ASCII characters without spaces{shown}")
    for name in _S3_DURATIONS:
        value = getattr(cfg, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= _S3_MAX_SECONDS:
            problems.append(f"{name} must be a number of seconds in 0..{_S3_MAX_SECONDS}, got {value!r}")
    for name, least in _S3_COUNTS.items():
        value = getattr(cfg, name)
        if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= _S3_MAX_COUNT:
            problems.append(f"{name} must be an int in {least}..{_S3_MAX_COUNT}, got {value!r}")
    if problems:
        raise ConfigurationError(f"S3 settings: {'; '.join(problems)}; fix them in StorageConfig or TrainVault(...)")


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
