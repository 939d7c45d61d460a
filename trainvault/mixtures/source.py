"""One component of a mixture: its records, passes and windows, and where draw j lands.

Draw j of a component is position ``j % size`` of pass ``j // size``, and a pass is an
epoch of the component's own order (`EpochOrder`: manifest order, or blocks permuted and
records mixed within windows, keyed by the component's selection and the seed). Without
replacement the draw is the record at that position. With replacement it is a record
drawn uniformly (keyed hash of pass and draw) from the window holding that position: a
record may come 0, 1 or more times a pass, and reads keep the window locality a
uniform draw over the whole component would lose (one block read per record).
`component_source` resolves a `MixtureComponent` through a loader factory's `select_blocks`,
the same path a plain loader's selection takes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trainvault.errors import ConfigurationError, SelectionError
from trainvault.loading.factory import SplitLoaderFactory
from trainvault.loading.fetch import BlockFetcher
from trainvault.loading.order import BlockPlan, EpochOrder, derive_key
from trainvault.mixtures.spec import MixtureComponent
from trainvault.mixtures.state import ComponentIdentity
from trainvault.publication.manifest import ShardEntry

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)

#: (component, pass, window): the unit a worker decodes and keeps while it draws from it.
WindowKey = tuple[int, int, int]


def _mix(key: int, values: np.ndarray) -> np.ndarray:
    """splitmix64 of each value under `key` (uint64, wrapping)."""
    with np.errstate(over="ignore"):
        x = values.astype(np.uint64) * _GOLDEN + np.uint64(key)
        x = (x ^ (x >> np.uint64(30))) * _M1
        x = (x ^ (x >> np.uint64(27))) * _M2
        return x ^ (x >> np.uint64(31))


def groups(keys: np.ndarray) -> Iterator[tuple[int, slice | np.ndarray]]:
    """Each value present in `keys` (small ints, few distinct) and where it occurs: a full
    slice when it is the only one (the common case: no mask to build or apply)."""
    if not len(keys):
        return
    lo, hi = int(keys.min()), int(keys.max())
    if lo == hi:
        yield lo, slice(None)
        return
    for v in range(lo, hi + 1):
        sel = keys == v
        if sel.any():
            yield v, sel


@dataclass
class ComponentSource:
    """A resolved component: its shards, block plan and order settings."""

    name: str
    replacement: bool
    fetcher: BlockFetcher
    plan: BlockPlan
    key: int
    shuffle: bool
    window_blocks: int
    _orders: dict[int, EpochOrder] = field(default_factory=dict, repr=False)
    _perms: dict[tuple[int, int], np.ndarray | None] = field(default_factory=dict, repr=False)

    @property
    def size(self) -> int:
        return self.plan.total_records

    @property
    def shards(self) -> tuple[ShardEntry, ...]:
        return self.fetcher.shards

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_orders": {}, "_perms": {}}  # rebuilt in the worker when needed

    def order(self, epoch: int) -> EpochOrder:
        got = self._orders.get(epoch)
        if got is None:
            if len(self._orders) >= 2:  # passes only move forward
                self._orders.pop(min(self._orders))
            got = self._orders[epoch] = EpochOrder(self.plan, self.key, epoch, self.shuffle, self.window_blocks)
        return got

    def locate(self, draws: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Pass, window and window member (index into the window's records concatenated) of each draw."""
        epochs, pos = np.divmod(draws, self.size)
        windows = np.empty_like(draws)
        members = np.empty_like(draws)
        for e, sel in groups(epochs):
            order = self.order(e)
            k = np.searchsorted(order.window_start, pos[sel], side="right") - 1
            windows[sel] = k
            if self.replacement:
                sizes = order.window_start[k + 1] - order.window_start[k]
                members[sel] = (_mix(derive_key(self.key, "draw", e), draws[sel]) % sizes.astype(np.uint64)).astype(
                    np.int64
                )
            else:
                members[sel] = self._members(order, k, pos[sel])
        return epochs, windows, members

    def _members(self, order: EpochOrder, k: np.ndarray, pos: np.ndarray) -> np.ndarray:
        """Window member of each pass position `pos` in window `k` (its shuffled place)."""
        if not order.shuffle:
            members: np.ndarray = pos - order.window_start[k]
            return members
        out = np.empty_like(pos)
        for w, at in groups(k):
            local = pos[at] - int(order.window_start[w])
            perm = self._permutation(order, w)
            out[at] = local if perm is None else perm[local]
        return out

    def _permutation(self, order: EpochOrder, window: int) -> np.ndarray | None:
        """The window's record order, kept for the two latest windows (draws move forward)."""
        key = (order.epoch, window)
        if key not in self._perms:
            if len(self._perms) >= 2:
                self._perms.pop(min(self._perms))
            self._perms[key] = order.record_permutation(window)
        return self._perms[key]

    def window_plan_blocks(self, epoch: int, window: int) -> list[int]:
        return self.order(epoch).window_plan_blocks(window)

    def wanted(self, epoch: int, window: int) -> list[tuple[int, int]]:
        """(shard, block) of the window's blocks, in the order its records concatenate."""
        plan = self.plan
        return [(int(plan.shard[i]), int(plan.block[i])) for i in self.window_plan_blocks(epoch, window)]

    def members_blocks(self, epoch: int, window: int, members: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Plan block and block-local index (counting dealt records) of window members."""
        blocks = np.asarray(self.window_plan_blocks(epoch, window), dtype=np.int64)
        counts = self.plan.records[blocks]
        ends = np.cumsum(counts)
        which = np.searchsorted(ends, members, side="right")
        return blocks[which], members - (ends[which] - counts[which])


def component_source(
    factory: SplitLoaderFactory, split: str, comp: MixtureComponent
) -> tuple[ComponentSource, ComponentIdentity]:
    """The source of mixture component `comp` within `split`, read through `factory`, and
    the identity its resume state binds (`SelectionError` for an unknown stage or one that
    holds no records)."""
    p = factory.plan
    if p.view is not None:
        raise ConfigurationError("a mixture batches stored records; a record view (materializer) is not supported")
    chosen = factory.select_blocks(split, comp.stage)
    if chosen.blocks.total_records == 0:
        raise SelectionError(
            f"mixture component {comp.name!r} ({chosen.selection.describe()}) holds no records to draw"
        )
    source = ComponentSource(
        name=comp.name,
        replacement=comp.replacement,
        fetcher=chosen.fetcher,
        plan=chosen.blocks,
        key=chosen.order_key,
        shuffle=p.shuffle,
        window_blocks=p.shuffle_window_blocks,
    )
    identity = ComponentIdentity(
        selection_sha256=chosen.selection.sha256,
        exclude_sha256=chosen.exclude_sha256,
        records=chosen.blocks.total_records,
    )
    return source, identity
