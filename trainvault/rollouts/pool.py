"""The content-addressed pool under rollout archives: objects, owner records and the collector.

Layout under a pool URI::

    objects/sha256/<hex>   chunk bytes, named by their SHA-256 (identical chunks stored once)
    owners/<name>.json     one owner record per saved archive: the digests it keeps alive
    gc/<run>.json          present while a collector runs

Retention protocol. A writer puts its objects, commits its owner record, then waits out
any running collector and re-creates any of its objects that went missing, and only then
publishes its index. A collector announces itself (gc marker) before it reads the owner
records and deletes nothing after its marker's deadline. So either the collector saw the
writer's owner record, or the writer saw the collector's marker and repaired after it
finished: an index never names a deleted object. The grace period additionally keeps
young unowned objects (a writer between its puts and its owner record) untouched.

Why "either ... or" holds: both sides rely on listings that are complete (`Storage.list`
shows every object that exists throughout the call, or raises). A collector that missed
an owner record therefore began listing owners before the record existed, so its marker
was already there when the writer, after committing the record, listed the markers: the
writer waits for it, or it had already finished (its deletions done) and the repair
restores them. A collector never deletes on a partial view of the owners: a record
released after the listing is skipped (its claim is gone), and any other failure to list
or read one raises before the first deletion.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from numbers import Real

from trainvault.canonical import is_sha256_hex, sha256_hex
from trainvault.errors import (
    ConfigurationError,
    ConflictError,
    IntegrityError,
    ManifestError,
    ObjectNotFoundError,
    ObjectTooLargeError,
    StorageError,
)
from trainvault.rollouts.documents import GcMarker, OwnerRecord
from trainvault.storage import Storage
from trainvault.storage.store import StorageSource, storage_or_default
from trainvault.uris import join_uri, normalize_uri

#: How long a collector may run before it stops deleting (writers wait at most this long).
GC_MAX_SECONDS = 600.0
#: Allowance for clock differences between a writer and a collector.
CLOCK_MARGIN_S = 5.0
_POLL_S = 0.2
_PUT_ATTEMPTS = 5


def object_uri(pool: str, digest: str) -> str:
    return join_uri(pool, "objects", "sha256", digest)


def owner_uri(pool: str, name: str) -> str:
    return join_uri(pool, "owners", f"{name}.json")


def new_owner_name(archive_uri: str) -> str:
    """A fresh owner record name: the archive's URI digest plus a nonce, so attempts never collide."""
    return f"{sha256_hex(normalize_uri(archive_uri).encode())[:32]}-{uuid.uuid4().hex}"


def put_object(storage: Storage, pool: str, digest: str, data: bytes | bytearray) -> bool:
    """Store `data` at its content address; True when this call created it."""
    uri = object_uri(pool, digest)
    attempts = 0
    while True:
        attempts += 1
        try:
            return storage.put_create(uri, data)
        except ConflictError:
            raise IntegrityError(
                f"pool object {uri} does not hold the bytes its name promises (sha256 {digest}); the pool is "
                "damaged: move that object aside so it can be rewritten, and check the archives that use it"
            ) from None
        except StorageError:
            # A collector may delete an unowned object between the create attempt and the
            # comparison read (and another writer may re-create it): simply try again.
            if attempts == _PUT_ATTEMPTS:
                raise


def read_object(storage: Storage, pool: str, digest: str, size: int, *, archive: str) -> bytes:
    """A pool object's bytes, checked against its size and digest."""
    uri = object_uri(pool, digest)
    try:
        data = storage.get(uri, max_bytes=size)
    except ObjectNotFoundError:
        raise ObjectNotFoundError(
            f"{uri} (a chunk of rollout archive {archive}) is missing from its pool: it was garbage-collected "
            "after the archive was released, or the pool was moved; the archive's samples cannot be loaded"
        ) from None
    except ObjectTooLargeError:
        data = None  # larger than its size: not read
    if data is None or len(data) != size or sha256_hex(data) != digest:
        found = "more" if data is None else len(data)
        raise IntegrityError(
            f"{uri} (a chunk of rollout archive {archive}) does not match its digest ({found} bytes, "
            f"expected {size}); the object was altered or truncated: nothing from it is used"
        )
    return data


def write_owner(storage: Storage, pool: str, name: str, archive_uri: str, digests: Iterable[str]) -> str:
    record = OwnerRecord(archive=normalize_uri(archive_uri), objects=sorted(set(digests)), created_unix=time.time())
    uri = owner_uri(pool, name)
    storage.put_create(uri, record.to_json_bytes())
    return uri


def settle_after_owner(
    storage: Storage,
    pool: str,
    objects: Mapping[str, bytes | bytearray],
    *,
    max_wait_s: float = GC_MAX_SECONDS + 2 * CLOCK_MARGIN_S,
) -> list[str]:
    """After the owner record is committed: wait out running collectors, then re-create any
    object that is missing. Returns the digests that had to be re-created."""
    _wait_for_collectors(storage, pool, max_wait_s)
    repaired = []
    for digest, data in objects.items():
        if not storage.exists(object_uri(pool, digest)):
            put_object(storage, pool, digest, data)
            repaired.append(digest)
    return repaired


def _wait_for_collectors(storage: Storage, pool: str, max_wait_s: float) -> None:
    # Only collectors already announced now can have missed our owner record (they list
    # owners after announcing); later ones will see it, so they are not waited for.
    give_up = time.monotonic() + max_wait_s
    pending: dict[str, float] = {}
    for info in storage.list(join_uri(pool, "gc")):
        try:
            marker = GcMarker.from_json_bytes(storage.get_document(info.uri), source=info.uri)
            pending[info.uri] = marker.deadline_unix
        except ObjectNotFoundError:
            continue  # that collector finished while we listed
        except ManifestError:
            # Unreadable marker: assume a collector runs until the longest run would end.
            pending[info.uri] = time.time() + GC_MAX_SECONDS
    while pending:
        for uri, deadline in list(pending.items()):
            if time.time() >= deadline + CLOCK_MARGIN_S or not storage.exists(uri):
                del pending[uri]  # finished, or past the point where it may delete anything
        if not pending:
            return
        if time.monotonic() > give_up:
            raise StorageError(
                f"collector(s) {', '.join(pending)} still hold pool {pool}; the archive was not published. "
                "Retry the save once they finish, or delete those markers if no collector is running"
            )
        time.sleep(_POLL_S)


@dataclass
class GcReport:
    """What a collection found and did (`deleted` lists what a dry run would delete)."""

    pool: str
    grace_s: float
    dry_run: bool
    objects: int = 0
    owners: int = 0
    referenced: int = 0
    kept_young: int = 0
    deleted: list[str] = field(default_factory=list)
    freed_bytes: int = 0
    #: Owner records whose archive index is missing or names another owner (kept: fail closed).
    orphan_owners: list[str] = field(default_factory=list)
    #: Objects under objects/sha256/ whose names are not digests (never deleted).
    foreign: list[str] = field(default_factory=list)
    #: False when the deadline stopped the run early; run it again.
    complete: bool = True


def _grace_seconds(grace: float | timedelta) -> float:
    """`grace` in seconds: a `TypeError` for anything but a number or a timedelta, a
    `ConfigurationError` for a negative (or NaN) one."""
    if isinstance(grace, timedelta):
        seconds = grace.total_seconds()
    elif isinstance(grace, Real) and not isinstance(grace, bool):
        seconds = float(grace)
    else:
        raise TypeError(f"grace must be seconds (a number) or a timedelta, got {type(grace).__name__}")
    if not seconds >= 0:
        raise ConfigurationError(f"gc grace must be a non-negative duration, got {seconds} seconds")
    return seconds


def gc(
    pool: str,
    *,
    grace: float | timedelta,
    storage: StorageSource | None = None,
    dry_run: bool = False,
    check_orphans: bool = True,
    max_seconds: float = GC_MAX_SECONDS,
    on_delete: Callable[[str], None] | None = None,
) -> GcReport:
    """Delete pool objects that no owner record names and that were older than `grace` when
    the collection began.

    `grace`: seconds or a timedelta; give writers at least that long between their first
    object put and their owner record. A dry run writes and deletes nothing. Fails closed:
    when any owner record cannot be listed or read, it raises and deletes nothing.
    """
    grace_s = _grace_seconds(grace)
    storage = storage_or_default(storage)
    pool = normalize_uri(pool)
    _check_is_pool(storage, pool)
    report = GcReport(pool=pool, grace_s=grace_s, dry_run=dry_run)
    marker_uri = None
    started = time.time()
    deadline = started + max_seconds
    if not dry_run:
        # Announce before reading owners: a writer whose owner record we miss will see this.
        marker_uri = join_uri(pool, "gc", f"{uuid.uuid4().hex}.json")
        storage.put_create(marker_uri, GcMarker(started_unix=started, deadline_unix=deadline).to_json_bytes())
    try:
        referenced = _owned_digests(storage, pool, report, check_orphans)
        # Age is measured from our start, so objects put while we run are kept whatever the
        # grace. That is not what makes gc safe (store clocks and timestamp granularity
        # differ from ours); the marker and the writer's repair are.
        cutoff = datetime.fromtimestamp(started, tz=UTC) - timedelta(seconds=grace_s)
        _sweep(storage, pool, referenced, cutoff, None if dry_run else deadline, on_delete, report)
    finally:
        if marker_uri is not None:
            storage.delete(marker_uri)
    return report


def _check_is_pool(storage: Storage, pool: str) -> None:
    """Refuse a folder that holds objects but none of a pool's (an archive folder, a dataset),
    before a collector marks it. An empty one passes: a pool before its first save."""
    if storage.list(join_uri(pool, "owners")) or storage.list(join_uri(pool, "objects")):
        return
    # A writer may put the pool's first object between the listings above and this one: the
    # pool's own folders never count as something else.
    own = tuple(join_uri(pool, part) + "/" for part in ("gc", "owners", "objects"))
    other = next((o.uri for o in storage.list(pool) if not o.uri.startswith(own)), None)
    if other is not None:
        raise ConfigurationError(
            f"{pool} is not a rollout pool: it holds {other} but no pool objects (objects/sha256/) or owner records "
            "(owners/); collect the pool the archives were saved with (`trainvault archive inspect ARCHIVE` names it)"
        )


def _sweep(
    storage: Storage,
    pool: str,
    referenced: set[str],
    cutoff: datetime,
    deadline: float | None,
    on_delete: Callable[[str], None] | None,
    report: GcReport,
) -> None:
    """Delete (unless `deadline` is None: a dry run) unreferenced objects older than `cutoff`,
    stopping at `deadline`; count everything in `report`."""
    prefix = join_uri(pool, "objects", "sha256")
    for info in storage.list(prefix):
        report.objects += 1
        digest = info.uri[len(prefix) + 1 :]
        if not is_sha256_hex(digest):
            report.foreign.append(info.uri)
            continue
        if digest in referenced:
            continue
        if info.last_modified is None or info.last_modified >= cutoff:
            report.kept_young += 1
            continue
        if deadline is not None:
            if time.time() >= deadline:
                report.complete = False  # writers stop waiting for us at the deadline
                break
            storage.delete(info.uri)
            if on_delete is not None:
                on_delete(info.uri)
        report.deleted.append(info.uri)
        report.freed_bytes += info.size


def _owned_digests(storage: Storage, pool: str, report: GcReport, check_orphans: bool) -> set[str]:
    """Every digest a live owner record names, or an error: never a partial set.

    `Storage.list` raises rather than return less than every record that exists
    throughout the listing, and any failure to read a record propagates, so gc deletes
    nothing on an incomplete view. A record deleted after the listing was released (the
    only way records go): its claim is gone, so skipping it is exact, not a guess.
    """
    referenced: set[str] = set()
    for info in storage.list(join_uri(pool, "owners")):
        try:
            raw = storage.get_document(info.uri)
        except ObjectNotFoundError:
            continue
        record = OwnerRecord.from_json_bytes(raw, source=info.uri)
        report.owners += 1
        referenced.update(record.objects)
        if check_orphans and _is_orphan(storage, info.uri, record):
            report.orphan_owners.append(info.uri)
    report.referenced = len(referenced)
    return referenced


def _is_orphan(storage: Storage, record_uri: str, record: OwnerRecord) -> bool:
    """An owner record whose archive never published (a crashed save) or lost the publish race."""
    from trainvault.rollouts.documents import ArchiveIndex

    try:
        raw = storage.get_document(record.archive)
    except ObjectNotFoundError:
        return True
    try:
        index = ArchiveIndex.from_json_bytes(raw, source=record.archive)
    except ManifestError:
        return False  # not ours to judge; keep its objects
    return owner_uri(index.pool, index.owner) != normalize_uri(record_uri)
