"""Hash many stored objects at once: SHA-256 and size of each, read on a pool of threads.

Reads (file reads, object-store streams) and `hashlib` both release the GIL, so while
one thread waits for bytes another hashes the chunk it already has: I/O and hashing
overlap, and several cores hash at once.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol, TextIO

from trainvault.progress import Progress, terminal_bar
from trainvault.storage import Storage
from trainvault.storage.store import StorageSource, storage_of

#: Bytes asked for per streamed read: large enough that per-call overhead vanishes.
CHUNK_BYTES = 8 << 20
DEFAULT_THREADS = 8


class HashProgress(Progress):
    """Files finished and bytes hashed, of the totals expected."""

    @property
    def files_done(self) -> int:
        return self.done

    @property
    def files_total(self) -> int:
        return self.total


HashProgressCallback = Callable[[HashProgress], None]


def terminal_hash_progress(label: str = "hashing", stream: TextIO | None = None) -> HashProgressCallback | None:
    """A callback drawing a bar on `stream` (stderr), or None when it is not a terminal."""
    return terminal_bar(label, "files", stream)


def continued(progress: HashProgressCallback | None, files: int, nbytes: int) -> HashProgressCallback | None:
    """`progress` for work that follows `files` files and `nbytes` bytes already hashed, so
    the counts it shows are those of the whole job."""
    if progress is None:
        return None
    report = progress

    def after(p: HashProgress) -> None:
        report(HashProgress(p.done + files, p.total + files, p.bytes_done + nbytes, p.bytes_total + nbytes))

    return after


@dataclass(frozen=True)
class HashedObject:
    """An object's size and SHA-256 as read now; `data` holds its bytes when asked to keep them."""

    uri: str
    size: int
    sha256: str
    data: bytes | None = None


class ChunkConsumer(Protocol):
    """Sees an object's bytes in order while they are hashed (no second read)."""

    def feed(self, chunk: bytes) -> None: ...

    def close(self) -> None:
        """The object ended."""


class _Tee:
    """Feeds every one of several consumers the same chunks."""

    def __init__(self, consumers: list[ChunkConsumer]):
        self.consumers = consumers

    def feed(self, chunk: bytes) -> None:
        for c in self.consumers:
            c.feed(chunk)

    def close(self) -> None:
        for c in self.consumers:
            c.close()


def fed_by_hashing(*factories: Mapping[str, Callable[[], ChunkConsumer]]) -> dict[str, Callable[[], ChunkConsumer]]:
    """`hash_objects` consumers that feed, for each URI, every consumer any of `factories` makes for it."""
    by_uri: dict[str, list[Callable[[], ChunkConsumer]]] = {}
    for factory in factories:
        for uri, make in factory.items():
            by_uri.setdefault(uri, []).append(make)
    return {uri: _teeing(makes) for uri, makes in by_uri.items()}


def _teeing(makes: list[Callable[[], ChunkConsumer]]) -> Callable[[], ChunkConsumer]:
    """A consumer factory feeding one consumer from each of `makes`."""
    return lambda: _Tee([make() for make in makes])


class _Tally:
    """Objects and bytes hashed so far by every thread, reported to `progress` at each step."""

    def __init__(self, progress: HashProgressCallback | None, files_total: int, bytes_total: int):
        self._progress = progress
        self._files_total, self._bytes_total = files_total, bytes_total
        self._files = self._bytes = 0
        self._lock = threading.Lock()

    def add(self, files: int, nbytes: int) -> None:
        if self._progress is None:
            return
        with self._lock:
            self._files += files
            self._bytes += nbytes
            self._progress(
                HashProgress(self._files, self._files_total, self._bytes, max(self._bytes_total, self._bytes))
            )


def _read_kept(storage: Storage, uri: str, bound_size: int | None, tally: _Tally) -> HashedObject:
    """Read a kept object whole: to its bound size, or as a document when nothing binds its size."""
    data = storage.get(uri, expected_size=bound_size) if bound_size is not None else storage.get_document(uri)
    tally.add(1, len(data))
    return HashedObject(uri, len(data), hashlib.sha256(data).hexdigest(), data)


def _hash_streamed(
    storage: Storage, uri: str, bound_size: int | None, sink: ChunkConsumer | None, tally: _Tally
) -> HashedObject:
    """Stream an object through the hash (and `sink`), keeping none of its bytes."""
    h = hashlib.sha256()
    size = 0
    for chunk in storage.stream(uri, chunk_size=CHUNK_BYTES, expected_size=bound_size):
        h.update(chunk)
        if sink is not None:
            sink.feed(chunk)
        size += len(chunk)
        tally.add(0, len(chunk))
    if sink is not None:
        sink.close()
    tally.add(1, 0)
    return HashedObject(uri, size, h.hexdigest())


def hash_objects(
    storage: StorageSource,
    uris: Sequence[str],
    *,
    keep: Collection[str] = (),
    expected_sizes: Mapping[str, int] | None = None,
    bound_sizes: Mapping[str, int] | None = None,
    threads: int = DEFAULT_THREADS,
    progress: HashProgressCallback | None = None,
    consumers: Mapping[str, Callable[[], ChunkConsumer]] | None = None,
) -> dict[str, HashedObject]:
    """Read and hash every URI (each once); keep the bytes of those in `keep`.

    `expected_sizes` only sizes the progress total. `bound_sizes`: the size that binds an
    object; another size raises `IntegrityError`, and no byte past it is read. A kept object
    without a bound size is read as a document (at most `StorageConfig.max_document_bytes`).
    `consumers[uri]()` (for URIs not
    kept) makes a consumer that is fed the chunks as they are hashed, on the same thread.
    Errors (missing object, store failure) propagate from the first URI that failed.
    """
    storage = storage_of(storage)
    todo = list(dict.fromkeys(uris))
    if not todo:
        return {}
    bound = bound_sizes or {}
    sizes = {**bound, **(expected_sizes or {})}
    tally = _Tally(progress, len(todo), sum(sizes.get(u, 0) for u in todo))

    def one(uri: str) -> HashedObject:
        if uri in keep:
            return _read_kept(storage, uri, bound.get(uri), tally)
        sink = consumers[uri]() if consumers and uri in consumers else None
        return _hash_streamed(storage, uri, bound.get(uri), sink, tally)

    with ThreadPoolExecutor(max_workers=max(1, min(threads, len(todo))), thread_name_prefix="trainvault-hash") as pool:
        futures = [pool.submit(one, u) for u in todo]
        try:
            return {f.result().uri: f.result() for f in futures}
        finally:
            for f in futures:
                f.cancel()
