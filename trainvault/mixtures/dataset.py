"""The IterableDataset of a mixture run: one rank's batches, formed inside the workers.

From the run's last re-dealing point the slots are cut into rounds of ``world_size x
batch_size`` (`RankSchedule`, the split loader's dealing), rank r takes the r-th slice of
each round, and a rank's batches go to workers in chunks. For each batch the schedule
names every slot's component and draw, the component names its window and member. A
planner walks the worker's batches ahead of it and queues, per component, the windows in
the order the worker will need them; each component's fetcher reads those ahead, so a
worker decodes a window once and holds one window per component. Imports torch.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch.utils.data

from trainvault.errors import ConfigurationError
from trainvault.loading.iterable import SEQUENTIAL_LOOKAHEAD_BLOCKS
from trainvault.loading.order import RankSchedule, Redeal, worker_batches
from trainvault.loading.plan import LoaderPlan
from trainvault.mixtures.schedule import Timeline
from trainvault.mixtures.source import ComponentSource, WindowKey, groups

#: What a mixture worker yields: (step, epoch, position after the batch, collated batch).
MixtureItem = tuple[int, int, int, Any]

#: The schedule of a stream that never ends counts this many records.
ENDLESS = 1 << 62
#: How many batches the read-ahead plans past the batch being formed (at least): a component absent
#: from them (rare, or removed by a revision) is read when it is next needed.
PLAN_HORIZON_BATCHES = 256

#: Records planned together (whole batches, at least one): the schedule and lookups run
#: vectorised over all their slots, so fixed costs per plan stay small against the records.
PLAN_RECORDS = 16_384


@dataclass
class ChunkPlan:
    """Consecutive batches of a worker: their indices, sizes and positions after, the
    windows they draw from (sorted, so each component's in the order it needs them), and
    for every record (batches concatenated) the index of its window there and its member."""

    ts: list[int]
    counts: list[int]
    afters: list[int]
    windows: list[WindowKey]
    kids: list[int]
    members: list[int]


def window_ids(c: int, draws: np.ndarray, epochs: np.ndarray, windows: np.ndarray, keys: list[WindowKey]) -> np.ndarray:
    """Index among the (c, pass, window) keys appended to `keys` of each draw's window."""
    if len(draws) > 1 and (draws[1:] < draws[:-1]).any():  # not from slots in order; exact all the same
        rows, ids = np.unique(np.stack([epochs, windows], axis=1), axis=0, return_inverse=True)
        keys.extend((c, e, w) for e, w in rows.tolist())
        return ids.reshape(-1)
    # Draws rising with the slot: (pass, window) never goes back, so each change is a new
    # window, and equal ends mean one window (the common case: windows outlast a chunk).
    if not len(draws) or (epochs[0] == epochs[-1] and windows[0] == windows[-1]):
        keys.extend([(c, int(epochs[0]), int(windows[0]))] if len(draws) else [])
        return np.zeros(len(draws), dtype=np.int64)
    change = np.empty(len(draws), dtype=bool)
    change[:1] = True
    change[1:] = (epochs[1:] != epochs[:-1]) | (windows[1:] != windows[:-1])
    firsts = np.flatnonzero(change)
    keys.extend((c, e, w) for e, w in zip(epochs[firsts].tolist(), windows[firsts].tolist(), strict=False))
    return np.cumsum(change) - 1


class MixtureIterableDataset(torch.utils.data.IterableDataset[MixtureItem]):
    """One rank's batches of a mixture run from its last re-dealing point."""

    def __init__(self, plan: LoaderPlan, sources: Sequence[ComponentSource] = ()):
        super().__init__()
        if plan.batch_format != "records":
            # Fail closed: a mixture batch draws rows of several components' windows, which only
            # the record path gathers so far; silently handing records would break the caller.
            raise ConfigurationError(
                f"a mixture loader forms record batches only, not batch_format={plan.batch_format!r}: "
                "use batch_format='records' (the default) for mixtures"
            )
        self.sources = list(sources)
        # The plan's batching, flattened: these are read for every batch a worker forms.
        self.batch_size, self.drop_last = plan.batch_size, plan.drop_last
        self.rank, self.world_size = plan.rank, plan.world_size
        self.collate_fn = plan.batch_collate()
        self.timeline = Timeline([], [], [])
        self.point = Redeal(0, 0, 0, plan.batch_size, plan.world_size, plan.drop_last)

    def set_run(self, sources: Sequence[ComponentSource], timeline: Timeline, point: Redeal) -> None:
        """Deal from `point` (a step and slot) under `timeline`, over `sources` (by index)."""
        self.sources, self.timeline, self.point = list(sources), timeline, point

    def schedule(self, point: Redeal, rank: int | None = None, until: int | None = None) -> RankSchedule:
        """`rank`'s batches from `point` up to slot `until` (default: the stream's end)."""
        end = self.timeline.end if until is None else until
        return point.schedule(point.position, ENDLESS if end is None else end, self.rank if rank is None else rank)

    def plan(self, ts: list[int], schedule: RankSchedule) -> ChunkPlan:
        """Which component window and member each record of batches `ts` is."""
        starts, counts, afters = schedule.batch_arrays(np.asarray(ts, dtype=np.int64))
        if len(ts) and counts.min() == counts.max():  # whole rounds: one outer sum instead of an arange per batch
            slots = np.add.outer(starts, np.arange(counts[0], dtype=np.int64)).reshape(-1)
        else:
            slots = np.concatenate([np.arange(s, s + n, dtype=np.int64) for s, n in zip(starts, counts, strict=False)])
        comps, draws, _ = self.timeline.assign_slots(slots)
        kids, members = np.empty_like(draws), np.empty_like(draws)
        keys: list[WindowKey] = []
        for c, sel in groups(comps):  # ascending c: keys sorted by component, then pass and window
            mine = draws[sel]
            epochs, windows, members[sel] = self.sources[c].locate(mine)
            kids[sel] = len(keys) + window_ids(c, mine, epochs, windows, keys)
        return ChunkPlan(ts, counts.tolist(), afters.tolist(), keys, kids.tolist(), members.tolist())

    def plan_batches(self) -> int:
        """Batches planned together: PLAN_RECORDS' worth, at least one."""
        return max(1, PLAN_RECORDS // self.batch_size)

    def chunk(self, num_workers: int) -> int:
        """Batches per worker chunk: about two windows of every component, so a window is
        decoded by at most about two workers of a rank; 1 without workers."""
        if num_workers <= 1:
            return 1
        per = sum(s.size / max(1, s.order(0).windows) for s in self.sources if s.size)
        shuffle = any(s.shuffle for s in self.sources)
        return max(1, round(2 * per * (1 if shuffle else 8) / (self.batch_size * self.world_size)))

    def __iter__(self) -> Iterator[MixtureItem]:
        info = torch.utils.data.get_worker_info()
        num_workers, worker = (info.num_workers, info.id) if info is not None else (1, 0)
        schedule = self.schedule(self.point)
        mine = worker_batches(len(schedule), self.chunk(num_workers), num_workers, worker)
        return self._generate(_Planner(self, schedule, mine))

    def _generate(self, planner: _Planner) -> Iterator[MixtureItem]:
        streams: dict[int, Generator[list[Any], None, None]] = {}
        cache: dict[WindowKey, list[Any]] = {}
        try:
            while (plan := planner.next_plan()) is not None:
                at = 0
                held: list[Any] = [None] * len(plan.windows)
                for t, count, after in zip(plan.ts, plan.counts, plan.afters, strict=False):
                    planner.consumed += 1
                    kids = plan.kids[at : at + count]
                    for kid in sorted(set(kids)):
                        if held[kid] is None:
                            key = plan.windows[kid]
                            while key not in cache:
                                self._load_next(key[0], planner, streams, cache)
                            held[kid] = cache[key]
                    records = [held[k][m] for k, m in zip(kids, plan.members[at : at + count], strict=False)]
                    at += count
                    yield t, 0, after, self.collate_fn(records)
        finally:
            for stream in streams.values():
                stream.close()

    def _load_next(
        self,
        c: int,
        planner: _Planner,
        streams: dict[int, Generator[list[Any], None, None]],
        cache: dict[WindowKey, list[Any]],
    ) -> None:
        """Read component c's next planned window into `cache`, dropping its older one."""
        key = planner.next_load(c)
        source = self.sources[c]
        for old in [k for k in cache if k[0] == c]:
            del cache[old]  # windows of a component are needed in order: an older one never again
        window: list[Any] = []
        for i in source.window_plan_blocks(key[1], key[2]):
            block = next(streams[c], None) if c in streams else None
            if block is None:  # its read-ahead stopped at the plan horizon: read on from here
                lookahead = source.window_blocks if source.shuffle else SEQUENTIAL_LOOKAHEAD_BLOCKS
                streams[c] = source.fetcher.iter_blocks(planner.fetch_blocks(c), lookahead)
                block = next(streams[c])
            window.extend(source.plan.keep(i, block))
        cache[key] = window


class _Planner:
    """Walks a worker's batches ahead of it, `plan_batches()` at a time, keeping the plans for
    the batch loop and queueing per component the windows it will need: one queue for what
    to read, one for what to load, in the same order."""

    def __init__(self, dataset: MixtureIterableDataset, schedule: RankSchedule, batches: Iterator[int]):
        self.dataset, self.schedule, self.batches = dataset, schedule, batches
        self.plans: deque[ChunkPlan] = deque()
        self.fetch: dict[int, deque[WindowKey]] = {}
        self.load: dict[int, deque[WindowKey]] = {}
        self.last: dict[int, WindowKey] = {}
        self.planned = 0
        self.consumed = 0

    def advance(self, force: bool) -> bool:
        """Plan the next batches; without `force`, only within the horizon."""
        if not force and self.planned >= self.consumed + PLAN_HORIZON_BATCHES:
            return False
        ts = list(itertools.islice(self.batches, self.dataset.plan_batches()))
        if not ts:
            return False
        plan = self.dataset.plan(ts, self.schedule)
        self.planned += len(ts)
        self.plans.append(plan)
        for key in plan.windows:
            c = key[0]
            if self.last.get(c) != key:
                self.last[c] = key
                self.fetch.setdefault(c, deque()).append(key)
                self.load.setdefault(c, deque()).append(key)
        return True

    def next_plan(self) -> ChunkPlan | None:
        while not self.plans:
            if not self.advance(True):
                return None
        return self.plans.popleft()

    def _next(self, queues: dict[int, deque[WindowKey]], c: int, force: bool) -> WindowKey | None:
        while not queues.get(c):
            if not self.advance(force):
                return None
        return queues[c].popleft()

    def next_load(self, c: int) -> WindowKey:
        key = self._next(self.load, c, True)
        if key is None:
            raise RuntimeError(
                f"trainvault mixture: component {c} has no planned window left; the plan and the batches disagree"
            )
        return key

    def fetch_blocks(self, c: int) -> Iterator[tuple[int, int]]:
        source = self.dataset.sources[c]
        while (key := self._next(self.fetch, c, False)) is not None:
            yield from source.wanted(key[1], key[2])
