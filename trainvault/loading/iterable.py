"""The IterableDataset that forms whole batches inside each worker.

A worker yields ``(sequence number, epoch, position after, collated batch, worker, stage
figures)``; the loader puts the items back in sequence order and strips the bookkeeping.
Records never cross a process boundary one by one. Imports torch: import this module only
through the loader.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from itertools import tee
from typing import Any

import numpy as np
import torch.utils.data

from trainvault.errors import ConfigurationError, IntegrityError
from trainvault.formats.columns import ColumnBlock, concat
from trainvault.loading.bridge import Bridge, BridgedOrder
from trainvault.loading.columnar import column_batch
from trainvault.loading.fetch import BlockFetcher
from trainvault.loading.metrics import IN_PROCESS
from trainvault.loading.order import BlockPlan, EpochOrder, RankSchedule, chunk_batches, worker_batches
from trainvault.loading.plan import LoaderPlan
from trainvault.loading.view import RecordView
from trainvault.loading.watchdog import Watchdog

Item = tuple[int, int, int, Any, int | str, tuple[float, ...]]

#: Unshuffled reads keep this many blocks in flight per worker.
SEQUENTIAL_LOOKAHEAD_BLOCKS = 8


def _keep_columns(kept: tuple[int, ...] | None, block: ColumnBlock) -> ColumnBlock:
    """The rows of a block the plan deals (exclusions skipped), as `BlockPlan.keep` does for records."""
    return block if kept is None else block.take(np.asarray(kept, dtype=np.int64))


def _piece(window: Any, perm: Any, lo: int, hi: int, columns: bool) -> Any:
    """Rows lo:hi of a window in its order: through the permutation `perm` when shuffled."""
    if columns:
        return window.slice(lo, hi) if perm is None else window.take(perm[lo:hi])
    return window[lo:hi] if perm is None else [window[i] for i in perm[lo:hi]]


def _windows_needed(
    order: EpochOrder | BridgedOrder, schedule: RankSchedule, mine: list[int]
) -> Iterator[tuple[int, list[int]]]:
    """(window, its plan blocks) in the order the batches `mine` first need them."""
    last = -1
    for t in mine:
        b = schedule.batch(t)
        for k, _, _ in order.pieces(b.start, b.count):
            if k != last:
                last = k
                yield k, order.window_plan_blocks(k)


class SplitIterableDataset(torch.utils.data.IterableDataset[Item]):
    """One rank's batches of a selection, dealt over the DataLoader's workers."""

    def __init__(self, *, fetcher: BlockFetcher, blocks: BlockPlan, order_key: int, plan: LoaderPlan, infinite: bool):
        super().__init__()
        self.fetcher = fetcher
        #: Every selected block's shard, index and record count (exclusions removed).
        self.blocks = blocks
        self.order_key = order_key
        self.plan = plan
        self.infinite = infinite
        self.collate_fn = plan.batch_collate()
        self.total = blocks.total_records
        self._start = (0, 0)
        self._iteration = 0
        #: An epoch dealt in an earlier view's order less what was removed since (a resume across an amendment).
        self.bridge: Bridge | None = None
        # Set by set_start for the one DataLoader iterator its loader makes next: a DataLoader
        # rebuilt over this dataset (accelerate's skip_first_batches) finds it unset.
        self._armed = False

    def set_start(self, epoch: int, position: int) -> None:
        """Where the next iteration starts; later iterations of the same copy (persistent
        workers) start the epochs after it."""
        self._start = (epoch, position)
        self._iteration = 0
        self._armed = True

    def disarm(self) -> None:
        """The loader's iterator has started (its workers hold their copies): no other may."""
        self._armed = False

    def order(self, epoch: int) -> EpochOrder | BridgedOrder:
        if self.bridge is not None and self.bridge.epoch == epoch:
            return self.bridge.order
        return self.own_order(epoch)

    def own_order(self, epoch: int) -> EpochOrder:
        """This view's own order of `epoch` (never a bridge)."""
        p = self.plan
        return EpochOrder(self.blocks, self.order_key, epoch, p.shuffle, p.shuffle_window_blocks)

    def schedule(self, start: int) -> RankSchedule:
        p = self.plan
        return RankSchedule(start, self.total, p.batch_size, p.world_size, p.rank, p.drop_last)

    def __iter__(self) -> Iterator[Item]:
        info = torch.utils.data.get_worker_info()
        if not self._armed:
            raise ConfigurationError(
                f"rank {self.plan.rank}'s trainvault dataset was iterated by a DataLoader other than its TrainVaultDataLoader (one rebuilt "
                "over loader.dataset, as accelerate's skip_first_batches does when the Hugging Face Trainer "
                "resumes): it would yield trainvault's internal items and replay the epoch. Iterate the loader "
                "itself; with the Hugging Face Trainer use trainvault.loading.hf.TrainVaultTrainerMixin"
            )
        if info is None:
            self._armed = False  # in the trainer's process each start serves one iteration
        num_workers, worker = (info.num_workers, info.id) if info is not None else (1, 0)
        k = self._iteration
        self._iteration += 1
        epoch, position = self._start if k == 0 else (self._start[0] + k, 0)
        return self._generate(epoch, position, num_workers, worker, IN_PROCESS if info is None else worker)

    def watchdog(self, where: str) -> Watchdog | None:
        """A started watchdog for the process that forms batches (None: none configured)."""
        o = self.plan.observe
        if o.watchdog_s is None:
            return None
        return Watchdog(o.watchdog_s, o.on_stall, where, self.fetcher.describe_reads).start()

    def _generate(self, epoch: int, position: int, num_workers: int, worker: int, name: int | str) -> Iterator[Item]:
        if self.total == 0:
            return
        where = f"rank {self.plan.rank}, " + ("in the trainer's process" if name == IN_PROCESS else f"worker {worker}")
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
        chunk = chunk_batches(self.own_order(epoch), self.plan.batch_size, self.plan.world_size, num_workers)
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
        s, b = int(self.blocks.shard[plan_index]), int(self.blocks.block[plan_index])
        out = view.expand(self.fetcher.shards[s], self.fetcher.descriptors[s].blocks[b].first_record, records)
        if len(out) != int(self.blocks.records[plan_index]):
            # Positions were counted from the view's block_counts; a different count would shift every later one.
            raise IntegrityError(
                f"block {b} of shard {self.fetcher.shards[s].key} gave {len(out)} logical records, its record view "
                f"counted {int(self.blocks.records[plan_index])}; the view does not describe this data: nothing of it is used"
            )
        return out

    def _window(
        self, order: EpochOrder | BridgedOrder, w: int, blocks: list[int], stream: Iterator[Any], columns: bool
    ) -> tuple[Any, Any]:
        """Window `w`'s dealt rows (records, or one `ColumnBlock`) and its record permutation (None: in order);
        a bridged epoch keeps the rows of the view its order comes from."""
        shuffled = order.record_permutation(w)
        plan = order.plan
        if columns:
            parts = [_keep_columns(plan.kept.get(i), next(stream)) for i in blocks]
            return concat(parts), shuffled
        view = self.plan.view
        window: list[Any] = []
        for i in blocks:
            block = plan.keep(i, next(stream))  # exclusions skipped
            if view is not None:
                block = self._expand(view, i, block)
            window.extend(block)
        return window, None if shuffled is None else shuffled.tolist()

    def _epoch(
        self,
        order: EpochOrder | BridgedOrder,
        schedule: RankSchedule,
        mine: list[int],
        offset: int,
        name: int | str,
        watch: Watchdog | None,
    ) -> Iterator[Item]:
        # Windows in the order this worker first needs them (positions only grow), found as the
        # batches are formed: the first batch does not wait for a walk over the whole epoch.
        for_reads, for_batches = tee(_windows_needed(order, schedule, mine))
        plan = order.plan  # a bridged epoch decodes the blocks of the view its order comes from
        wanted = ((int(plan.shard[i]), int(plan.block[i])) for _, blocks in for_reads for i in blocks)
        lookahead = self.plan.shuffle_window_blocks if order.shuffle else SEQUENTIAL_LOOKAHEAD_BLOCKS
        columns = self.plan.batch_format == "columns"
        stream = self.fetcher.iter_blocks(wanted, lookahead, watch, columns=columns)
        times = self.fetcher.times
        loaded: dict[int, tuple[Any, Any]] = {}
        if watch is not None:
            watch.busy()
        try:
            for t in mine:
                b = schedule.batch(t)
                pieces: list[Any] = []
                for k, lo, hi in order.pieces(b.start, b.count):
                    while k not in loaded:
                        # Windows before k are finished: this worker's positions only grow.
                        for old in [w for w in loaded if w < k]:
                            del loaded[old]
                        w, blocks = next(for_batches)
                        loaded[w] = self._window(order, w, blocks, stream, columns)
                    window, perm = loaded[k]
                    pieces.append(_piece(window, perm, lo, hi, columns))
                t0 = time.perf_counter()
                batch = column_batch(pieces) if columns else self.collate_fn([r for p in pieces for r in p])
                times.clock("collate", time.perf_counter() - t0)
                if watch is not None:
                    watch.idle()
                yield offset + t, order.epoch, b.after, batch, name, times.take()
                if watch is not None:
                    watch.busy()
        finally:
            stream.close()
