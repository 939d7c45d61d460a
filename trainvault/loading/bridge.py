"""The rest of an epoch re-dealt after records were taken out of the view a run started it in.

A run that resumes under exclusions that only add to those its state counted (an approval's
amendment) keeps the epoch it is in: what it consumed stays consumed, and the positions
still to come are those of the earlier view's order with the newly excluded records left
out. A `BridgedOrder` is that order: the source `EpochOrder` (the earlier view's, same
selection and key) seen through the sorted source positions of the removed records. Its
positions count the records that remain, so it has exactly the later view's record count,
and it answers `pieces`, `members` and the window calls the way `EpochOrder` does, so the
dealing and `trace` code use either. Later epochs use the later view's own order.
"""

from __future__ import annotations

import bisect
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from trainvault.loading.order import BlockPlan, EpochOrder


class BridgedOrder:
    """`source`'s order of one epoch less the records at the sorted source positions `removed`."""

    def __init__(self, source: EpochOrder, removed: np.ndarray):
        self.source = source
        self.removed = np.asarray(removed, dtype=np.int64)
        self.plan: BlockPlan = source.plan
        self.epoch = source.epoch
        self.shuffle = source.shuffle
        self.window_blocks = source.window_blocks
        self.total = source.total - len(self.removed)
        # removed[i] - i: how many kept records precede each removed one.
        self._kept_before_removed = self.removed - np.arange(len(self.removed), dtype=np.int64)

    @property
    def windows(self) -> int:
        return self.source.windows

    def window_plan_blocks(self, k: int) -> list[int]:
        return self.source.window_plan_blocks(k)

    def record_permutation(self, k: int) -> np.ndarray | None:
        return self.source.record_permutation(k)

    def members(self, k: int, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        return self.source.members(k, lo, hi)

    def source_position(self, position: int) -> int:
        """The source position of kept record `position` (the source's end for `total`)."""
        if position >= self.total:
            return int(self.source.total)
        return position + int(np.searchsorted(self._kept_before_removed, position, side="right"))

    def kept_before(self, source_position: int) -> int:
        """How many kept records lie before `source_position` of the source order."""
        return source_position - int(np.searchsorted(self.removed, source_position, side="left"))

    def pieces(self, start: int, count: int) -> Iterator[tuple[int, int, int]]:
        """(window, local start, local end) of the source covering kept positions [start, start + count)."""
        if count <= 0:
            return
        lo = self.source_position(start)
        hi = self.source_position(start + count - 1) + 1
        a, b = (int(np.searchsorted(self.removed, q, side="left")) for q in (lo, hi))
        run = lo
        for gap in self.removed[a:b].tolist():
            if gap > run:
                yield from self.source.pieces(run, gap - run)
            run = gap + 1
        if hi > run:
            yield from self.source.pieces(run, hi - run)


@dataclass(frozen=True)
class Bridge:
    """Epoch `epoch` of a run is dealt in `order`, the order of the view after amendment
    `source` (the level its history names) less what was removed since."""

    epoch: int
    source: int
    order: BridgedOrder


def removed_positions(
    order: EpochOrder, shard_keys: Sequence[str], exclude: Mapping[str, Collection[int]]
) -> np.ndarray:
    """The sorted positions in `order` of the records `exclude` names (shard key -> record
    indices; records the order does not deal, or of shards outside `shard_keys`, are ignored)."""
    plan = order.plan
    where = {key: s for s, key in enumerate(shard_keys)}
    slot = np.empty(len(plan), dtype=np.int64)
    slot[order.block_order] = np.arange(len(plan), dtype=np.int64)
    inverse: dict[int, np.ndarray] = {}
    out: list[int] = []
    for key, indices in exclude.items():
        s = where.get(key)
        if s is None or not indices:
            continue
        # A plan lists its blocks shard by shard, in selection order.
        lo, hi = (int(np.searchsorted(plan.shard, s, side=side)) for side in ("left", "right"))
        firsts = plan.first[lo:hi].tolist() if plan.first is not None else []
        for index in sorted(indices):
            j = bisect.bisect_right(firsts, index) - 1
            local = _dealt_index(plan, lo + j, index - firsts[j]) if j >= 0 else None
            if local is None:
                continue  # not dealt by `order` either
            i = lo + j
            w = int(slot[i]) // order.window_blocks
            members = order.window_plan_blocks(w)
            offset = int(plan.records[members[: members.index(i)]].sum()) + local
            if order.shuffle:
                if w not in inverse:
                    perm = order.record_permutation(w)
                    inverse[w] = np.argsort(perm, kind="stable") if perm is not None else np.arange(0)
                offset = int(inverse[w][offset])
            out.append(int(order.window_start[w]) + offset)
    return np.asarray(sorted(out), dtype=np.int64)


def _dealt_index(plan: BlockPlan, i: int, stored: int) -> int | None:
    """Block-local index, counting dealt records, of stored record `stored` of plan block `i` (None: not dealt)."""
    kept = plan.kept.get(i)
    if kept is None:
        return stored if stored < int(plan.records[i]) else None
    j = bisect.bisect_left(kept, stored)
    return j if j < len(kept) and kept[j] == stored else None
