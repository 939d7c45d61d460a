"""`Storage`: reads and writes objects by URI, with trainvault's bounds, recovery and errors."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Protocol

from trainvault.errors import (
    ConflictError,
    IntegrityError,
    ObjectNotFoundError,
    ObjectTooLargeError,
    StorageError,
)
from trainvault.storage.backend import Backend, NotRegular, TooLarge, read_limit
from trainvault.storage.clients import Clients
from trainvault.storage.config import StorageConfig
from trainvault.storage.reads import READS
from trainvault.storage.recovery import CONTACTS, recovering, resuming
from trainvault.storage.translate import size_error
from trainvault.uris import Location, parse_uri

#: S3 refuses a single PUT above 5 GiB, and create-only writes are always single PUTs.
SINGLE_PUT_LIMIT = 5 * 1024**3


@dataclass(frozen=True)
class ObjectInfo:
    uri: str
    size: int
    etag: str | None
    #: When the store last wrote the object (UTC); filled by `Storage.list`, None from `head`.
    last_modified: datetime | None = None


class Storage:
    """Reads and writes objects by URI with trainvault's timeouts and error types.

    Picklable: clients are created lazily per process and never pickled.
    """

    def __init__(self, config: StorageConfig | None = None):
        self.config = config or StorageConfig()
        self._clients = Clients(self.config)

    def __getstate__(self) -> dict[str, Any]:
        endpoint = self.config.s3_base_url
        return {"config": self.config, "answered": bool(endpoint and CONTACTS.answered(endpoint))}

    def __setstate__(self, state: dict[str, Any]) -> None:
        type(self).__init__(self, state["config"])
        if state.get("answered") and self.config.s3_base_url:
            CONTACTS.heard_from(self.config.s3_base_url)

    def __repr__(self) -> str:
        return f"Storage({self.config!r})"

    # -- reads ------------------------------------------------------------------

    def get(
        self, uri: str, *, if_match: str | None = None, max_bytes: int | None = None, expected_size: int | None = None
    ) -> bytes:
        """The whole object; with `if_match`, only the version with that etag (else `IntegrityError`).

        `max_bytes`: an object larger than this raises `ObjectTooLargeError`, and is not read.
        `expected_size`: the size that binds the object; any other size raises `IntegrityError`,
        and no more than that many bytes are read.
        """
        loc = parse_uri(uri)
        limit = read_limit(max_bytes, expected_size)
        try:
            data = recovering(self._clients, loc, "read", lambda b: b.get(loc.path, if_match, limit))
        except TooLarge as exc:
            raise size_error(loc.uri, exc, expected_size) from None
        READS.add(len(data), 1)
        if expected_size is not None and len(data) != expected_size:
            raise size_error(loc.uri, TooLarge(len(data), expected_size), expected_size)
        return data

    def get_document(self, uri: str, *, if_match: str | None = None) -> bytes:
        """A JSON document's bytes: `get` refusing objects above `StorageConfig.max_document_bytes`."""
        return self.get(uri, if_match=if_match, max_bytes=self.config.max_document_bytes)

    def get_range(self, uri: str, start: int, end: int) -> bytes:
        """Bytes [start, end) of the object; `IntegrityError` if the object is shorter.

        Never reads past the object's end, whatever `end` says.
        """
        if end <= start:
            return b""
        loc = parse_uri(uri)
        op = f"read bytes {start}-{end} of"
        data = recovering(self._clients, loc, op, lambda b: b.get_range(loc.path, start, end))
        READS.add(len(data), 1)
        _check_range(loc.uri, start, end, data)
        return data

    def get_ranges(self, uri: str, ranges: Sequence[tuple[int, int]]) -> list[memoryview]:
        """Bytes [start, end) of each of `ranges` of one object, as read-only views (no copy).

        One call for all of them: an object store coalesces ranges less than 1 MiB apart
        into one request and runs the requests in parallel; a local file is opened once.
        `IntegrityError` if the object is shorter than a range; an empty range gives b"".
        """
        loc = parse_uri(uri)
        wanted = [(start, end) for start, end in ranges if end > start]
        if not wanted:
            return [memoryview(b"") for _ in ranges]
        op = f"read {len(wanted)} byte range(s) {wanted[0][0]}-{wanted[-1][1]} of"
        parts = iter(recovering(self._clients, loc, op, lambda b: b.get_ranges(loc.path, wanted)))
        out = []
        for start, end in ranges:
            data = memoryview(next(parts) if end > start else b"")
            _check_range(loc.uri, start, max(start, end), data)
            out.append(data)
        # One call: the store's coalescing decides how many requests it makes.
        READS.add(sum(len(part) for part in out), 1)
        return out

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
        limit = read_limit(max_bytes, expected_size)
        pos = start
        READS.add(0, 1)
        try:
            for chunk in resuming(self._clients, loc, start, end, chunk_size, limit):
                pos += len(chunk)
                READS.add(len(chunk), streamed=True)
                if limit is not None and pos > limit:  # it grew after it was opened
                    raise size_error(loc.uri, TooLarge(None, limit), expected_size)
                yield chunk
        except TooLarge as exc:
            raise size_error(loc.uri, exc, expected_size) from None
        if end is not None and pos < end:
            raise IntegrityError(f"{loc.uri}: ended at byte {pos}, expected {end}; the object is truncated")
        if end is None and expected_size is not None and pos != expected_size:
            raise size_error(loc.uri, TooLarge(pos, expected_size), expected_size)

    def head(self, uri: str) -> ObjectInfo:
        loc = parse_uri(uri)
        READS.add(0, 1)
        found = recovering(self._clients, loc, "inspect", lambda b: b.head(loc.path))
        return ObjectInfo(loc.uri, found.size, found.etag)

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
        during the call may or may not appear). In a local folder, objects are regular files
        (links to them included); any other entry (a FIFO, socket or device, a link to
        nothing or to a folder, a link loop) is refused as reads refuse it, so the listing
        raises a `StorageError` naming it. Anything else that fails raises a `StorageError` too.
        """
        loc = parse_uri(prefix_uri)
        READS.add(0, 1)
        return sorted(recovering(self._clients, loc, "list", lambda b: _listing(b, loc)), key=lambda o: o.uri)

    # -- writes -----------------------------------------------------------------

    def put(self, uri: str, data: bytes) -> ObjectInfo:
        """Write (or overwrite) an object. Publications use `put_create` instead."""
        loc = parse_uri(uri)
        etag = recovering(self._clients, loc, "write", lambda b: b.put(loc.path, data))
        return ObjectInfo(loc.uri, len(data), etag)

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
        loc = parse_uri(uri)
        if recovering(self._clients, loc, "create", lambda b: b.create(loc.path, data)):
            return True
        try:
            existing = self.get(uri)
        except ObjectNotFoundError:
            raise StorageError(f"{uri}: the store reported the object exists, then could not find it; retry") from None
        if existing != bytes(data):
            raise ConflictError(
                f"{loc.uri} already exists with different content ({len(existing)} bytes, not {size}); "
                "published objects are immutable: write to a new location"
            )
        return False

    def delete(self, uri: str) -> None:
        """Delete an object; deleting a missing object is not an error."""
        loc = parse_uri(uri)
        recovering(self._clients, loc, "delete", lambda b: _delete_if_present(b, loc.path))


def _listing(backend: Backend, loc: Location) -> list[ObjectInfo]:
    """One attempt at listing the folder `loc`: everything in it, or a `StorageError`."""
    head = replace(loc, path="").uri  # what Location.uri puts before the path
    try:
        return [ObjectInfo(head + o.path, o.size, o.etag, o.last_modified) for o in backend.list(loc.path.rstrip("/"))]
    except (StorageError, PermissionError):
        raise  # already typed, or made an AuthenticationError by translate
    except NotRegular as exc:
        entry = replace(loc, path=exc.path.lstrip("/")).uri
        raise StorageError(
            f"cannot list {loc.uri}: {entry} is {exc.kind}, not a regular file; a listing holds regular files "
            "only and hides nothing: remove it or put the published object back; nothing was listed"
        ) from None
    except OSError as exc:
        # Never "no objects": a caller such as the rollout collector would take an
        # unreadable folder for an empty one and delete what it protects.
        if exc.filename:  # an entry that cannot be followed (a link loop): name it as its URI
            entry = replace(loc, path=str(exc.filename).lstrip("/")).uri
            raise StorageError(
                f"cannot list {loc.uri}: {entry} cannot be read as a regular file ({exc.strerror}); a listing "
                "holds regular files only: remove it or put the published object back; nothing was listed"
            ) from exc
        raise StorageError(f"cannot list {loc.uri}: {exc}; nothing was listed: check the folder and retry") from exc


def _check_range(uri: str, start: int, end: int, data: Any) -> None:
    if len(data) != end - start:
        raise IntegrityError(
            f"{uri}: asked for bytes {start}-{end} but got {len(data)}; the object is shorter "
            "than its index says (truncated)"
        )


def _delete_if_present(backend: Backend, path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        backend.delete(path)


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


def storage_or_default(source: StorageSource | None) -> Storage:
    """`storage_of(source)`, or for None a default `Storage` (local paths and memory:// only):
    what a function whose `storage` argument is optional reads through."""
    return Storage() if source is None else storage_of(source)
