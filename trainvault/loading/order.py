"""The global record order of an epoch, and how it is dealt to ranks and workers.

Everything here is integer arithmetic on (manifest sha256, selection, seed, epoch): no
library random stream is used, so every process computes the same order without talking
to the others, and an upgrade of NumPy or Python never changes the order of a running job.

Order of an epoch
    Off: manifest (or curriculum) order, block by block. On: the blocks are permuted, cut
    into windows of `window_blocks` consecutive blocks of that permutation, and the records
    of each window are permuted, so a batch draws from up to `window_blocks` shards.

Dealing
    From a start position the order is cut into rounds of ``world_size * batch_size``
    records; rank r takes the r-th contiguous `batch_size` slice of each round. The tail
    (fewer than a round) is split evenly, one smaller batch per rank. So every rank gets
    the same number of batches. Remainder policy ``pad``: only when the tail holds fewer
    records than there are ranks, a rank left without one repeats one tail record (at most
    ``world_size - 1`` repeats an epoch). Policy ``drop`` (``drop_last=True``): the tail is
    not yielded. Within a rank, batches go to workers in chunks of consecutive batches, so
    each worker decodes mostly its own windows; the loader puts them back in order. An
    infinite run deals its chunks on across epoch boundaries, so every worker keeps getting
    batches however few an epoch holds.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from trainvault.canonical import canonical_json

REMAINDER_PAD = "pad"
REMAINDER_DROP = "drop"

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def derive_key(*parts: object) -> int:
    """A 64-bit key from JSON-able parts (SHA-256 of their canonical JSON)."""
    return int.from_bytes(hashlib.sha256(canonical_json(list(parts))).digest()[:8], "little")


def keyed_permutation(n: int, key: int) -> np.ndarray:
    """A permutation of range(n) fixed by `key`: indices sorted by splitmix64(key, index)."""
    x = np.arange(1, n + 1, dtype=np.uint64) * _GOLDEN + np.uint64(key)
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    x ^= x >> np.uint64(31)
    return np.argsort(x, kind="stable")


@dataclass(frozen=True)
class BlockPlan:
    """Every block of a selection, in selection order: shard index, block index, records."""

    shard: np.ndarray
    block: np.ndarray
    records: np.ndarray

    @property
    def total_records(self) -> int:
        return int(self.records.sum())

    def __len__(self) -> int:
        return len(self.records)


class EpochOrder:
    """The record order of one epoch as windows of blocks; positions count records."""

    def __init__(self, plan: BlockPlan, key: int, epoch: int, shuffle: bool, window_blocks: int):
        self.plan = plan
        self.key = key
        self.epoch = epoch
        self.shuffle = shuffle
        n = len(plan)
        if shuffle:
            self.block_order = keyed_permutation(n, derive_key(key, "blocks", epoch))
            self.window_blocks = window_blocks
        else:
            # Unshuffled records stay in block order, so a block is its own decode unit.
            self.block_order = np.arange(n)
            self.window_blocks = 1
        counts = plan.records[self.block_order]
        edges = np.arange(0, n, self.window_blocks)
        window_records = np.add.reduceat(counts, edges) if n else np.zeros(0, dtype=np.int64)
        self.window_start = np.concatenate([[0], np.cumsum(window_records)]).astype(np.int64)
        self.total = int(self.window_start[-1])

    @property
    def windows(self) -> int:
        return len(self.window_start) - 1

    def window_of(self, position: int) -> int:
        return int(np.searchsorted(self.window_start, position, side="right")) - 1

    def window_plan_blocks(self, k: int) -> list[int]:
        """Plan indices of window k's blocks, in the order their records are concatenated."""
        return [int(i) for i in self.block_order[k * self.window_blocks : (k + 1) * self.window_blocks]]

    def record_permutation(self, k: int) -> np.ndarray | None:
        """Window-local record order of window k (None: unshuffled, identity)."""
        if not self.shuffle:
            return None
        size = int(self.window_start[k + 1] - self.window_start[k])
        return keyed_permutation(size, derive_key(self.key, "records", self.epoch, k))

    def pieces(self, start: int, count: int) -> Iterator[tuple[int, int, int]]:
        """(window, local start, local end) covering positions [start, start + count)."""
        end = start + count
        k = self.window_of(start)
        while start < end:
            w_end = int(self.window_start[k + 1])
            stop = min(end, w_end)
            base = int(self.window_start[k])
            if stop > start:  # a window with no records (possible under a record view) is never read
                yield k, start - base, stop - base
            start = stop
            k += 1


@dataclass(frozen=True)
class RankBatch:
    """One batch of a rank: `count` records from epoch position `start`; `after` is the
    global position once every rank has received its batch of this round."""

    start: int
    count: int
    after: int


class RankSchedule:
    """The batches one rank gets from `start` to the end of an epoch of `total` records."""

    def __init__(self, start: int, total: int, batch_size: int, world_size: int, rank: int, drop_last: bool):
        self.start, self.total = start, total
        self.batch_size, self.world_size, self.rank = batch_size, world_size, rank
        self.round = batch_size * world_size
        remaining = max(0, total - start)
        self.full_rounds, self.tail = divmod(remaining, self.round)
        self.remainder = REMAINDER_DROP if drop_last else REMAINDER_PAD
        self.has_tail = self.tail > 0 and not drop_last

    def __len__(self) -> int:
        return self.full_rounds + (1 if self.has_tail else 0)

    @property
    def padded(self) -> int:
        """Records repeated this epoch across all ranks (pad policy, tiny tails only)."""
        return self.world_size - self.tail if self.has_tail and self.tail < self.world_size else 0

    @property
    def dropped(self) -> int:
        return self.tail if self.remainder == REMAINDER_DROP else 0

    def batch(self, t: int) -> RankBatch:
        if t < self.full_rounds:
            first = self.start + t * self.round + self.rank * self.batch_size
            after = self.start + (t + 1) * self.round
            # The drop policy ends the epoch at its last full round.
            if t == self.full_rounds - 1 and not self.has_tail:
                after = self.total
            return RankBatch(first, self.batch_size, after)
        if t == self.full_rounds and self.has_tail:
            base = self.start + self.full_rounds * self.round
            size, extra = divmod(self.tail, self.world_size)
            count = size + (1 if self.rank < extra else 0)
            first = base + self.rank * size + min(self.rank, extra)
            if count == 0:  # fewer tail records than ranks: repeat one so no rank hangs
                first, count = base + self.rank % self.tail, 1
            return RankBatch(first, count, self.total)
        raise IndexError(t)


def worker_batches(n_batches: int, chunk: int, num_workers: int, worker: int, first: int = 0) -> Iterator[int]:
    """Indices of a rank's batches that `worker` forms: the rank's batch stream is cut into
    chunks of `chunk` consecutive batches, dealt round robin to workers. Batch 0 is number
    `first` of the stream (an infinite run numbers its batches on across epochs)."""
    end = first + n_batches
    c = first // chunk
    c += (worker - c) % num_workers
    while c * chunk < end:
        yield from range(max(c * chunk, first) - first, min((c + 1) * chunk, end) - first)
        c += num_workers


def chunk_batches(order: EpochOrder, batch_size: int, world_size: int, num_workers: int) -> int:
    """Batches per worker chunk: about two decode windows of records, so a window is
    decoded by at most two workers of a rank; 1 (plain round robin) without workers."""
    if num_workers <= 1 or order.windows == 0:
        return 1
    per_window = order.total / order.windows
    target = 2 * per_window * (1 if order.shuffle else 8)
    return max(1, round(target / (batch_size * world_size)))
