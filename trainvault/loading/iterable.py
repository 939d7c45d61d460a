"""The IterableDataset that forms whole batches inside each worker.

A worker yields ``(sequence number, epoch, position after, collated batch, worker, stage
figures)``; the loader puts the items back in sequence order and strips the bookkeeping.
Records never cross a process boundary one by one. Imports torch: import this module only
through the loader.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import torch.utils.data

from trainvault.errors import IntegrityError
from trainvault.loading.fetch import BlockFetcher
from trainvault.loading.metrics import IN_PROCESS
from trainvault.loading.order import BlockPlan, EpochOrder, RankSchedule, chunk_batches, worker_batches
from trainvault.loading.view import RecordView
from trainvault.loading.watchdog import Watchdog
from trainvault.publication.manifest import ShardDescriptor, ShardEntry
from trainvault.storage import ReadableStorage

Item = tuple[int, int, int, Any, int | str, tuple[float, ...]]

#: Unshuffled reads keep this many blocks in flight per worker.
SEQUENTIAL_LOOKAHEAD_BLOCKS = 8


class SplitIterableDataset(torch.utils.data.IterableDataset[Item]):
    """One rank's batches of a selection, dealt over the DataLoader's workers."""

    def __init__(
        self,
        *,
        storage: ReadableStorage,
        data_format: str,
        shards: tuple[ShardEntry, ...],
        descriptors: tuple[ShardDescriptor, ...],
        plan: BlockPlan,
        order_key: int,
        shuffle: bool,
        window_blocks: int,
        batch_size: int,
        drop_last: bool,
        rank: int,
        world_size: int,
        collate_fn: Callable[[list[dict[str, Any]]], Any],
        infinite: bool,
        view: RecordView | None = None,
        watchdog_s: float | None = None,
        on_stall: str = "log",
    ):
        super().__init__()
        self.fetcher = BlockFetcher(storage, data_format, shards, descriptors)
        self.plan = plan
        self.order_key = order_key
        self.shuffle = shuffle
        self.window_blocks = window_blocks
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.rank = rank
        self.world_size = world_size
        self.collate_fn = collate_fn
        self.infinite = infinite
        self.view = view
        self.watchdog_s = watchdog_s
        self.on_stall = on_stall
        self.total = plan.total_records
        self._start = (0, 0)
        self._iteration = 0

    def set_start(self, epoch: int, position: int) -> None:
        """Where the next iteration starts; later iterations of the same copy (persistent
        workers) start the epochs after it."""
        self._start = (epoch, position)
        self._iteration = 0

    def order(self, epoch: int) -> EpochOrder:
        return EpochOrder(self.plan, self.order_key, epoch, self.shuffle, self.window_blocks)

    def schedule(self, start: int) -> RankSchedule:
        return RankSchedule(start, self.total, self.batch_size, self.world_size, self.rank, self.drop_last)

    def __iter__(self) -> Iterator[Item]:
        info = torch.utils.data.get_worker_info()
        num_workers, worker = (info.num_workers, info.id) if info is not None else (1, 0)
        k = self._iteration
        self._iteration += 1
        epoch, position = self._start if k == 0 else (self._start[0] + k, 0)
        return self._generate(epoch, position, num_workers, worker, IN_PROCESS if info is None else worker)

    def watchdog(self, where: str) -> Watchdog | None:
        """A started watchdog for the process that forms batches (None: none configured)."""
        if self.watchdog_s is None:
            return None
        return Watchdog(self.watchdog_s, self.on_stall, where, self.fetcher.describe_reads).start()

    def _generate(self, epoch: int, position: int, num_workers: int, worker: int, name: int | str) -> Iterator[Item]:
        if self.total == 0:
            return
        where = f"rank {self.rank}, " + ("in the trainer's process" if name == IN_PROCESS else f"worker {worker}")
        watch = self.watchdog(where)
        try:
            yield from self._deal(epoch, position, num_workers, worker, name, watch)
        finally:
            if watch is not None:
                watch.stop()

    def _deal(
        self, epoch: int, position: int, num_workers: int, worker: int, name: int | str, watch: Watchdog | None
    ) -> Iterator[Item]:
        # Record and window counts, hence the chunk, are the same in every epoch.
        chunk = chunk_batches(self.order(epoch), self.batch_size, self.world_size, num_workers)
        offset = 0
        while True:
            if position >= self.total:
                epoch, position = epoch + 1, 0
            schedule = self.schedule(position)
            # Chunks are dealt on from batch `offset` of the run: torch's in-order iterator
            # asks the workers in turn forever, so none may sit out an epoch.
            mine = list(worker_batches(len(schedule), chunk, num_workers, worker, offset))
            if mine:
                yield from self._epoch(self.order(epoch), schedule, mine, offset, name, watch)
            if not self.infinite:
                return
            offset += len(schedule)
            epoch, position = epoch + 1, 0

    def _expand(self, view: RecordView, plan_index: int, records: list[dict[str, Any]]) -> list[Any]:
        s, b = int(self.plan.shard[plan_index]), int(self.plan.block[plan_index])
        out = view.expand(self.fetcher.shards[s], self.fetcher.descriptors[s].blocks[b].first_record, records)
        if len(out) != int(self.plan.records[plan_index]):
            # Positions were counted from the view's block_counts; a different count would shift every later one.
            raise IntegrityError(
                f"block {b} of shard {self.fetcher.shards[s].key} gave {len(out)} logical records, its record view "
                f"counted {int(self.plan.records[plan_index])}; the view does not describe this data: nothing of it is used"
            )
        return out

    def _epoch(
        self,
        order: EpochOrder,
        schedule: RankSchedule,
        mine: list[int],
        offset: int,
        name: int | str,
        watch: Watchdog | None,
    ) -> Iterator[Item]:
        batches = [schedule.batch(t) for t in mine]
        # Windows in the order this worker first needs them (positions only grow).
        needed: list[int] = []
        for b in batches:
            for k, _, _ in order.pieces(b.start, b.count):
                if not needed or needed[-1] != k:
                    needed.append(k)
        window_blocks = [order.window_plan_blocks(k) for k in needed]
        wanted = ((int(self.plan.shard[i]), int(self.plan.block[i])) for blocks in window_blocks for i in blocks)
        lookahead = self.window_blocks if order.shuffle else SEQUENTIAL_LOOKAHEAD_BLOCKS
        stream = self.fetcher.iter_blocks(wanted, lookahead, watch)
        times = self.fetcher.times
        loaded: dict[int, tuple[list[dict[str, Any]], list[int] | None]] = {}
        next_window = 0
        if watch is not None:
            watch.busy()
        try:
            for t, b in zip(mine, batches, strict=False):
                records: list[dict[str, Any]] = []
                for k, lo, hi in order.pieces(b.start, b.count):
                    while k not in loaded:
                        # Windows before k are finished: this worker's positions only grow.
                        for old in [w for w in loaded if w < k]:
                            del loaded[old]
                        window: list[Any] = []
                        for i in window_blocks[next_window]:
                            block = self.plan.keep(i, next(stream))  # exclusions skipped
                            if self.view is not None:
                                block = self._expand(self.view, i, block)
                            window.extend(block)
                        shuffled = order.record_permutation(needed[next_window])
                        loaded[needed[next_window]] = (window, None if shuffled is None else shuffled.tolist())
                        next_window += 1
                    window, perm = loaded[k]
                    if perm is None:
                        records.extend(window[lo:hi])
                    else:
                        records.extend([window[i] for i in perm[lo:hi]])
                t0 = time.perf_counter()
                batch = self.collate_fn(records)
                times.clock("collate", time.perf_counter() - t0)
                if watch is not None:
                    watch.idle()
                yield offset + t, order.epoch, b.after, batch, name, times.take()
                if watch is not None:
                    watch.busy()
        finally:
            stream.close()
