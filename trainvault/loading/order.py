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

Steps
    A run's history of re-dealing points (`Redeal`: a start, a resume, an epoch cut short)
    fixes which batch each step was, so `step_batch` locates a step by arithmetic, without
    replaying the steps before it. Exclusions are removed in `block_plan`, so everything
    above counts the remaining records.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, TypeVar

import numpy as np

from trainvault.canonical import canonical_json
from trainvault.errors import ConfigurationError, SelectionError

REMAINDER_PAD: Final = "pad"
REMAINDER_DROP: Final = "drop"

R = TypeVar("R")

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
    """Every block of a selection, in selection order: shard index, block index, records.

    `records` counts the records the order deals (exclusions skipped); `first` is each
    block's first stored record in its shard; `kept` lists, for a block that has
    exclusions, the block-local indices of its remaining records (a block with none left
    is not in the plan at all).
    """

    shard: np.ndarray
    block: np.ndarray
    records: np.ndarray
    first: np.ndarray | None = None
    kept: Mapping[int, tuple[int, ...]] = field(default_factory=dict)

    @property
    def total_records(self) -> int:
        return int(self.records.sum())

    def __len__(self) -> int:
        return len(self.records)

    def keep(self, i: int, records: list[R]) -> list[R]:
        """The records plan block `i` deals, from its decoded stored records."""
        kept = self.kept.get(i)
        return records if kept is None else [records[j] for j in kept]

    def record_index(self, i: int, local: int) -> int:
        """Index within its shard of record `local` of plan block `i` (counting dealt records)."""
        if self.first is None:
            raise ConfigurationError("this block plan does not know where its blocks start in their shards")
        kept = self.kept.get(i)
        return int(self.first[i]) + (local if kept is None else kept[local])


def block_plan(
    blocks: Sequence[Sequence[tuple[int, int]]], excluded: Sequence[Collection[int]] | None = None
) -> BlockPlan:
    """The plan of selected shards: `blocks[s]` lists (first record, record count) of shard
    s's blocks, `excluded[s]` the record indices of shard s that are never dealt."""
    shard_ix: list[int] = []
    block_ix: list[int] = []
    counts: list[int] = []
    firsts: list[int] = []
    kept: dict[int, tuple[int, ...]] = {}
    for s, shard_blocks in enumerate(blocks):
        skip = sorted(excluded[s]) if excluded is not None and excluded[s] else []
        starts = [first for first, _ in shard_blocks]
        by_block: dict[int, set[int]] = {}
        for r in skip:
            b = bisect.bisect_right(starts, r) - 1
            by_block.setdefault(b, set()).add(r - starts[b])
        for j, (first, count) in enumerate(shard_blocks):
            gone = by_block.get(j)
            left = count if gone is None else count - len(gone)
            if gone is not None and left == 0:
                continue  # wholly excluded: never read
            if gone is not None:
                kept[len(counts)] = tuple(r for r in range(count) if r not in gone)
            shard_ix.append(s)
            block_ix.append(j)
            counts.append(left)
            firsts.append(first)
    return BlockPlan(
        np.asarray(shard_ix, dtype=np.int64),
        np.asarray(block_ix, dtype=np.int64),
        np.asarray(counts, dtype=np.int64),
        np.asarray(firsts, dtype=np.int64),
        kept,
    )


def packed_block_plan(starts: Sequence[int], records: Sequence[int], picks: Sequence[int]) -> BlockPlan:
    """The plan of selected shards, with no exclusions, from a descriptor pack's columns: shard
    p's blocks are ``starts[p]:starts[p + 1]`` of `records` (each block's record count), and
    `picks` lists the selected shards' positions in the pack, in selection order."""
    start = np.asarray(starts, dtype=np.int64)
    count = np.asarray(records, dtype=np.int64)
    pick = np.asarray(picks, dtype=np.int64)
    lo = start[pick]
    per_shard = start[pick + 1] - lo
    shard = np.repeat(np.arange(len(pick), dtype=np.int64), per_shard)
    block = np.arange(int(per_shard.sum()), dtype=np.int64) - np.repeat(np.cumsum(per_shard) - per_shard, per_shard)
    flat = np.repeat(lo, per_shard) + block
    before = np.concatenate(([0], np.cumsum(count)))  # records in the pack before each block
    first = before[flat] - np.repeat(before[lo], per_shard)
    return BlockPlan(shard, block, count[flat], first, {})


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
        # Looked up twice per batch: a bisect on a list, not a NumPy call, which costs ~40x
        # more in a loop (and may hand the GIL to the read threads).
        self._starts: list[int] = self.window_start.tolist()
        self._order: list[int] = self.block_order.tolist()
        self.total = self._starts[-1]

    @property
    def windows(self) -> int:
        return len(self.window_start) - 1

    def window_of(self, position: int) -> int:
        return bisect.bisect_right(self._starts, position) - 1

    def window_plan_blocks(self, k: int) -> list[int]:
        """Plan indices of window k's blocks, in the order their records are concatenated."""
        return self._order[k * self.window_blocks : (k + 1) * self.window_blocks]

    def record_permutation(self, k: int) -> np.ndarray | None:
        """Window-local record order of window k (None: unshuffled, identity)."""
        if not self.shuffle:
            return None
        size = int(self.window_start[k + 1] - self.window_start[k])
        return keyed_permutation(size, derive_key(self.key, "records", self.epoch, k))

    def members(self, k: int, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        """Plan block and block-local index of window k's records lo..hi-1, in dealt order:
        record j of a window is record perm[j] of its blocks' records concatenated."""
        blocks = np.asarray(self.window_plan_blocks(k), dtype=np.int64)
        counts = self.plan.records[blocks]
        ends = np.cumsum(counts)
        perm = self.record_permutation(k)
        local = np.arange(lo, hi, dtype=np.int64) if perm is None else perm[lo:hi]
        which = np.searchsorted(ends, local, side="right")
        return blocks[which], local - (ends[which] - counts[which])

    def pieces(self, start: int, count: int) -> Iterator[tuple[int, int, int]]:
        """(window, local start, local end) covering positions [start, start + count)."""
        end = start + count
        k = self.window_of(start)
        starts = self._starts
        while start < end:
            stop = min(end, starts[k + 1])
            base = starts[k]
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

    def batches_before(self, position: int) -> int:
        """How many of these batches end (all ranks together) at or before `position`."""
        if position >= self.total:
            return len(self)
        done = min(max(0, position - self.start) // self.round, len(self))
        # Without a tail the last full round ends at the epoch's end, not at its last record.
        return done - 1 if done == len(self) and done else done

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

    def batch_arrays(self, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`batch(t)`'s start, count and after for each t of `ts`, vectorised over the full
        rounds (the last full round and the tail, which differ, go through `batch`)."""
        ts = np.asarray(ts, dtype=np.int64)
        starts = self.start + ts * self.round + self.rank * self.batch_size
        counts = np.full(len(ts), self.batch_size, dtype=np.int64)
        afters = self.start + (ts + 1) * self.round
        for i in np.flatnonzero(ts >= self.full_rounds - 1).tolist():
            b = self.batch(int(ts[i]))
            starts[i], counts[i], afters[i] = b.start, b.count, b.after
        return starts, counts, afters


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
    target: float = 2 * per_window * (1 if order.shuffle else 8)
    return max(1, round(target / (batch_size * world_size)))


@dataclass(frozen=True)
class Redeal:
    """A re-dealing point of a run: from `step` on, batches of `batch_size` x `world_size`
    were dealt from `position` of `epoch` (a start, a resume, a finite loader iterated
    again before the end of its epoch). Under an approval's amendments, `amendment` is the
    sequence of the amendment whose view the batches come from (0: the approval alone; None:
    the view of the state that holds it), and `bridged_from` the one whose view's order the
    first epoch follows, less what was removed since (None: the segment's own order)."""

    step: int
    epoch: int
    position: int
    batch_size: int
    world_size: int
    drop_last: bool
    amendment: int | None = None
    bridged_from: int | None = None

    def schedule(self, start: int, total: int, rank: int) -> RankSchedule:
        return RankSchedule(start, total, self.batch_size, self.world_size, rank, self.drop_last)


def step_batch(history: Sequence[Redeal], step: int, total: int, rank: int) -> tuple[int, RankBatch]:
    """Epoch and batch of `rank` at `step` of a run with this history, in O(1) of the steps."""
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise ConfigurationError(f"step must be an int >= 0, got {step!r}")
    if not history or step < history[0].step:
        raise SelectionError(f"step {step} is before this run's recorded history; it cannot be traced")
    seg = history[bisect.bisect_right([h.step for h in history], step) - 1]
    if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < seg.world_size:
        raise ConfigurationError(f"step {step} ran on {seg.world_size} rank(s); rank {rank!r} is not one of them")
    epoch, position = seg.epoch, seg.position
    if total and position >= total:
        epoch, position = epoch + 1, 0
    left = step - seg.step
    first = seg.schedule(position, total, rank)
    if left < len(first):
        return epoch, first.batch(left)
    every = seg.schedule(0, total, rank)
    if len(every) == 0:
        raise SelectionError(
            f"step {step} never happens: an epoch of {total} records gives no batch of {seg.batch_size} x "
            f"{seg.world_size} rank(s)"
        )
    left -= len(first)
    return epoch + 1 + left // len(every), every.batch(left % len(every))


def steps_until(seg: Redeal, epoch: int, position: int, total: int) -> int:
    """Batches an uninterrupted run from `seg` yields before reaching `position` of `epoch`."""
    start = seg.position if epoch == seg.epoch else 0
    done = seg.schedule(start, total, 0).batches_before(position)
    if epoch == seg.epoch:
        return seg.step + done
    whole = len(seg.schedule(0, total, 0))
    return seg.step + len(seg.schedule(seg.position, total, 0)) + (epoch - seg.epoch - 1) * whole + done
