"""Read-ahead of verified, decoded blocks on a few threads.

Fetching, SHA-256 checks and zstd/gzip decompression release the GIL, so reading the next
blocks overlaps with forming batches from the current ones, and object-store latency is
hidden. At most `lookahead` blocks are in flight or waiting, which bounds memory.

The threads stop at a block's inflated form (`ShardFormat.inflate_block`) and the
consuming thread builds its records: that step holds the GIL, and several threads
contending for it would slow the thread that forms batches.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from trainvault.publication.manifest import ShardDescriptor, ShardEntry
from trainvault.publication.reader import ShardReader
from trainvault.storage import Storage

DEFAULT_THREADS = 4


class BlockFetcher:
    """Decoded records of plan blocks, yielded in request order, read `lookahead` ahead."""

    def __init__(
        self,
        storage: Storage,
        data_format: str,
        shards: tuple[ShardEntry, ...],
        descriptors: tuple[ShardDescriptor, ...],
        *,
        threads: int | None = None,
    ):
        self.storage = storage
        self.data_format = data_format
        self.shards = shards
        self.descriptors = descriptors
        self.threads = threads or DEFAULT_THREADS
        # Readers hold per-shard decode contexts, which threads must not share.
        self._local = threading.local()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        del state["_local"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._local = threading.local()

    def _reader(self, shard: int) -> ShardReader:
        readers = getattr(self._local, "readers", None)
        if readers is None:
            readers = self._local.readers = {}
        reader = readers.get(shard)
        if reader is None:
            reader = readers[shard] = ShardReader(
                self.storage, self.shards[shard], self.data_format, self.descriptors[shard]
            )
        return reader

    def _load(self, shard: int, block: int) -> Any:
        reader = self._reader(shard)
        ((index, data),) = reader.iter_block_bytes([block])
        return reader.inflate(index, data)

    def _finish(self, shard: int, block: int, inflated: Any) -> list[dict[str, Any]]:
        return self._reader(shard).records(block, inflated)

    def iter_blocks(self, wanted: Iterable[tuple[int, int]], lookahead: int) -> Iterator[list[dict[str, Any]]]:
        """Records of each (shard, block) in `wanted`, in that order."""
        wanted = iter(wanted)
        pending: deque[tuple[int, int, Future[Any]]] = deque()
        pool = ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="trainvault-read")
        try:

            def fill() -> None:
                while len(pending) < lookahead:
                    nxt = next(wanted, None)
                    if nxt is None:
                        return
                    pending.append((*nxt, pool.submit(self._load, *nxt)))

            fill()
            while pending:
                shard, block, future = pending.popleft()
                loaded = future.result()
                fill()
                yield self._finish(shard, block, loaded)
        finally:
            # A stopped iteration (break, error, worker shutdown) abandons queued reads.
            for _, _, f in pending:
                f.cancel()
            pool.shutdown(wait=False, cancel_futures=True)
