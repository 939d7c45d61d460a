"""Read-ahead of verified, decoded blocks on a few threads.

Fetching, SHA-256 checks and zstd/gzip decompression release the GIL, so reading the next
blocks overlaps with forming batches from the current ones, and object-store latency is
hidden. At most `lookahead` blocks are in flight or waiting, which bounds memory.

From an object store, consecutive blocks of one shard are read as a run, with one
`get_ranges` call (one request: obstore coalesces neighbouring ranges); from local files
block by block. Either way the buffers are hashed and decompressed where they lie, never
copied.

The threads stop at a block's inflated form (`ShardFormat.inflate_block`) and the
consuming thread builds its records: that step holds the GIL, and several threads
contending for it would slow the thread that forms batches.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Generator, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from trainvault.loading.metrics import StageTimes
from trainvault.loading.watchdog import Watchdog
from trainvault.publication.manifest import ShardDescriptor, ShardEntry
from trainvault.publication.reader import ShardReader
from trainvault.storage.readable import ReadableStorage

DEFAULT_THREADS = 4
#: An object-store run never spans more blocks than this (nor half the lookahead), so reads overlap.
MAX_RUN_BLOCKS = 8


def block_runs(wanted: Iterable[tuple[int, int]], longest: int) -> Iterator[tuple[int, list[int]]]:
    """(shard, consecutive block indices) of `wanted`, in its order, at most `longest` blocks each."""
    shard = -1
    run: list[int] = []
    for s, b in wanted:
        if run and (s != shard or b != run[-1] + 1 or len(run) >= longest):
            yield shard, run
            run = []
        shard = s
        run.append(b)
    if run:
        yield shard, run


class BlockFetcher:
    """Decoded records of plan blocks, yielded in request order, read `lookahead` ahead."""

    def __init__(
        self,
        storage: ReadableStorage,
        data_format: str,
        shards: tuple[ShardEntry, ...],
        descriptors: Sequence[ShardDescriptor],
        *,
        threads: int | None = None,
    ):
        self.storage = storage
        self.data_format = data_format
        self.shards = shards
        self.descriptors = descriptors
        self.threads = threads or DEFAULT_THREADS
        self.times = StageTimes()
        # Readers hold per-shard decode contexts, which threads must not share.
        self._local = threading.local()
        # Reads in flight, by thread name: what the watchdog names when no batch comes.
        self.reading: dict[str, tuple[int, list[int], float]] = {}

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for name in ("_local", "times", "reading"):
            del state[name]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._local = threading.local()
        self.times = StageTimes()
        self.reading = {}

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

    def _load(self, shard: int, run: list[int]) -> list[Any]:
        """Read, verify and inflate one run of blocks (on a read thread)."""
        me = threading.current_thread().name
        self.reading[me] = (shard, run, time.monotonic())
        try:
            reader = self._reader(shard)
            parts = reader.read_blocks(run, self.times.clock)
            t0 = time.perf_counter()
            out = [reader.inflate(index, data) for index, data in parts]
            self.times.clock("decompress", time.perf_counter() - t0)
            self.times.count(sum(len(d) for _, d in parts), 0, len(parts))
            return out
        finally:
            self.reading.pop(me, None)

    def _finish(self, shard: int, block: int, inflated: Any, columns: bool) -> Any:
        t0 = time.perf_counter()
        reader = self._reader(shard)
        decoded = reader.columns(block, inflated) if columns else reader.records(block, inflated)
        self.times.clock("decode", time.perf_counter() - t0)
        self.times.count(0, len(decoded), 0)
        return decoded

    def run_blocks(self, lookahead: int) -> int:
        """The longest run read as one: 1 from local files, where a request costs nothing and
        per-block reads keep every read thread busy; else up to half the lookahead, so an
        object store gets one request per run and two runs still overlap."""
        if all(s.uri.startswith(("file:", "/")) for s in self.shards):
            return 1
        return max(1, min(MAX_RUN_BLOCKS, lookahead // 2))

    def describe_reads(self) -> list[str]:
        """The reads in flight now, for people: shard, blocks and how long each has taken."""
        now = time.monotonic()
        return [
            f"{thread}: {self.shards[shard].key} ({self.shards[shard].uri}) block(s) {run[0]}"
            f"{'' if len(run) == 1 else f'-{run[-1]}'}, reading for {now - since:.1f} s"
            for thread, (shard, run, since) in sorted(self.reading.items())
        ]

    def iter_blocks(
        self,
        wanted: Iterable[tuple[int, int]],
        lookahead: int,
        watchdog: Watchdog | None = None,
        *,
        columns: bool = False,
    ) -> Generator[Any, None, None]:
        """Records of each (shard, block) in `wanted`, in that order (a `ColumnBlock` each with
        `columns`). While it waits for a read, a `watchdog` that gives up (``on_stall="raise"``)
        ends the wait with its error."""
        runs = block_runs(wanted, self.run_blocks(lookahead))
        pending: deque[tuple[int, list[int], Future[Any]]] = deque()
        pool = ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="trainvault-read")
        in_flight = 0
        try:

            def fill() -> None:
                nonlocal in_flight
                while in_flight < lookahead:
                    nxt = next(runs, None)
                    if nxt is None:
                        return
                    pending.append((*nxt, pool.submit(self._load, *nxt)))
                    in_flight += len(nxt[1])

            fill()
            while pending:
                shard, run, future = pending.popleft()
                loaded = _result(future, watchdog)
                in_flight -= len(run)
                fill()
                for block, inflated in zip(run, loaded, strict=False):
                    yield self._finish(shard, block, inflated, columns)
        finally:
            # A stopped iteration (break, error, worker shutdown) abandons queued reads.
            for _, _, f in pending:
                f.cancel()
            pool.shutdown(wait=False, cancel_futures=True)


def _result(future: Future[Any], watchdog: Watchdog | None) -> Any:
    if watchdog is None:
        return future.result()
    while True:
        try:
            return future.result(timeout=watchdog.poll_s)
        except FutureTimeout:
            watchdog.check()  # raises once the watchdog gives up on this wait
