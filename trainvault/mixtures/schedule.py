"""Which component each record slot of a mixture run draws from: exact, and O(1) per slot.

Slots number the records a run deals (0, 1, 2, ... across all ranks); the schedule is a
pure function of the mixture history and the slot, never of workers, ranks or batch size.

Within one segment (a stretch with fixed weights) the active components are the leaves
of a balanced binary tree. A node with left weight share p = a/b sends local slot x to
the left when round(p(x+1)) > round(p x) (rounding half up, in integers), so its left
child has received exactly round(p n) of the first n slots: within 1/2 of p n. Errors add
down the tree, so after n slots a component of share w has drawn within d/2 of w n, d the
tree's depth (ceil(log2 components)); any window of L consecutive slots inside a segment
holds within d records of w L. That is the share bound: d / L absolute (2 components:
1/32,000 over 1,000 batches of 32).

Each tree is periodic: shifting a slot by P, the least multiple of every node's b that
moves each child's local slots by a multiple of that child's own period, keeps every
decision and adds a fixed count to each component's draws. When P is small (weights with
few decimals) a slot is assigned by one lookup in a table of the first P slots built by
the tree itself, which gives exactly the tree's answer at a fraction of its cost.

Segments start at each revision and where a ``drop`` component finishes its pass (the
others renormalise; found by binary search on the exact counts, so still pure). A segment
with no component left ends the stream.
"""

from __future__ import annotations

import bisect
import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TypeAlias

import numpy as np

#: A leaf (component index) or a node (a, b, left, right): left share a/b.
Tree: TypeAlias = int | tuple[int, int, "Tree", "Tree"]
_INT64_SAFE = 1 << 60
#: Largest tree period assigned by table lookup (three int64 tables of this length, 1.5 MiB;
#: a process keeps the 16 latest).
MAX_TABLE_PERIOD = 1 << 16


def build_tree(items: Sequence[tuple[int, Fraction]]) -> Tree:
    """The balanced tree over (component index, weight) items, in their order."""
    if len(items) == 1:
        return items[0][0]
    mid = len(items) // 2
    left = sum((w for _, w in items[:mid]), Fraction(0))
    p = left / (left + sum((w for _, w in items[mid:]), Fraction(0)))
    return (p.numerator, p.denominator, build_tree(items[:mid]), build_tree(items[mid:]))


def tree_depth(tree: Tree) -> int:
    return 0 if isinstance(tree, int) else 1 + max(tree_depth(tree[2]), tree_depth(tree[3]))


def assign(tree: Tree, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Component index and that component's local draw number of each local slot in `x`."""
    if isinstance(tree, int):
        return np.full(len(x), tree, dtype=np.int64), x
    a, b, lt, rt = tree
    # round(p(x+1)) > round(p x) exactly when the remainder of (2ax + b) / 2b reaches 2b - 2a.
    t = 2 * a * x + b
    f0 = t // (2 * b)
    rem = t - f0 * (2 * b)  # not np.divmod: it refuses the object arrays of slots beyond int64
    go_left = rem >= 2 * b - 2 * a
    comp = np.empty(len(x), dtype=np.int64)
    draw = np.empty_like(x)
    comp[go_left], draw[go_left] = assign(lt, f0[go_left])
    comp[~go_left], draw[~go_left] = assign(rt, (x - f0)[~go_left])
    return comp, draw


def period(tree: Tree) -> tuple[int, dict[int, int]]:
    """The tree's period P and each component's draws per period: slot x + P draws what x
    draws, that many draws later."""
    if isinstance(tree, int):
        return 1, {tree: 1}
    a, b, lt, rt = tree
    (pl, cl), (pr, cr) = period(lt), period(rt)
    # k periods of b slots send k*a slots left and k*(b-a) right: whole child periods.
    k = math.lcm(pl // math.gcd(a, pl), pr // math.gcd(b - a, pr))
    per = {c: n * (k * a // pl) for c, n in cl.items()}
    per.update({c: n * (k * (b - a) // pr) for c, n in cr.items()})
    return k * b, per


@functools.lru_cache(maxsize=16)
def periodic_table(tree: Tree) -> tuple[int, np.ndarray, np.ndarray, np.ndarray] | None:
    """(P, component, draw and draws-per-period of that component for slots 0..P-1), or
    None when P exceeds MAX_TABLE_PERIOD."""
    p, per = period(tree)
    if p > MAX_TABLE_PERIOD:
        return None
    comps, draws = assign(tree, np.arange(p, dtype=np.int64))
    step = np.zeros(max(per) + 1, dtype=np.int64)
    step[list(per)] = list(per.values())
    return p, comps, draws, step[comps]


def assign_local(tree: Tree, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`assign`, by table lookup where the tree's period allows (the same answer, cheaper)."""
    table = periodic_table(tree)
    if table is None:
        if len(x) and (int(x.max()) + 2) * _max_b(tree) * 2 >= _INT64_SAFE:
            x = x.astype(object)  # exact beyond int64, slower
        comps, draws = assign(tree, x)
        return comps, draws.astype(np.int64)
    p, comps, draws, step = table
    q, r = np.divmod(x, p)
    return comps[r], draws[r] + q * step[r]


def prefix_counts(tree: Tree, n: int, out: dict[int, int]) -> dict[int, int]:
    """How many of the first `n` local slots each component of `tree` draws (added to `out`)."""
    if isinstance(tree, int):
        out[tree] = out.get(tree, 0) + n
        return out
    a, b, lt, rt = tree
    left = (2 * a * n + b) // (2 * b)
    prefix_counts(lt, left, out)
    return prefix_counts(rt, n - left, out)


@dataclass(frozen=True)
class Segment:
    """Slots from `start` on, under revision `revision`: `base[c]` draws of component c
    happened before it; `tree` (None: the stream ends at `start`) assigns the rest."""

    start: int
    revision: int
    base: tuple[int, ...]
    tree: Tree | None

    def counts_at(self, slot: int) -> tuple[int, ...]:
        """Draws of every component before `slot` (in this segment or at its start)."""
        if self.tree is None or slot <= self.start:
            return self.base
        local = prefix_counts(self.tree, slot - self.start, {})
        return tuple(n + local.get(c, 0) for c, n in enumerate(self.base))

    def run_out(self, c: int, size: int) -> int:
        """First slot at which component c has drawn `size` records in total."""
        need = size - self.base[c]
        if need <= 0:
            return self.start
        if self.tree is None:
            raise IndexError(f"component {c} never runs out in a segment that ends the stream")
        hi = 1
        while prefix_counts(self.tree, hi, {}).get(c, 0) < need:
            hi *= 2
        lo = hi // 2
        while lo < hi:  # smallest n with count(n) >= need
            mid = (lo + hi) // 2
            if prefix_counts(self.tree, mid, {}).get(c, 0) >= need:
                hi = mid
            else:
                lo = mid + 1
        return self.start + lo


class Timeline:
    """The segments of a mixture history over a fixed universe of components.

    `revisions`: (first slot, weight of each component index that takes part), oldest first.
    `sizes[c]` records make one pass of component c; `drops[c]` says it leaves when its
    first pass is used up (a dropped component stays out, also if a later revision lists it).
    """

    def __init__(
        self, sizes: Sequence[int], drops: Sequence[bool], revisions: Sequence[tuple[int, Mapping[int, Fraction]]]
    ):
        self.sizes, self.drops = tuple(sizes), tuple(drops)
        self.segments: list[Segment] = []
        base = (0,) * len(sizes)
        for r, (slot, weights) in enumerate(revisions):
            if self.segments:
                base = self.segments[-1].counts_at(slot)
            until = revisions[r + 1][0] if r + 1 < len(revisions) else None
            self._segments_of(r, slot, base, weights, until)
        self.starts = [s.start for s in self.segments]

    def _segments_of(
        self, r: int, slot: int, base: tuple[int, ...], weights: Mapping[int, Fraction], until: int | None
    ) -> None:
        while True:
            active = [(c, w) for c, w in weights.items() if not (self.drops[c] and base[c] >= self.sizes[c])]
            seg = Segment(slot, r, base, build_tree(active) if active else None)
            self.segments.append(seg)
            if seg.tree is None:
                return
            ends = [seg.run_out(c, self.sizes[c]) for c, _ in active if self.drops[c]]
            end = min(ends, default=None)
            if end is None or (until is not None and end >= until):
                return
            slot, base = end, seg.counts_at(end)

    @property
    def end(self) -> int | None:
        """The slot where the stream ends (None: it never does; a timeline of no revision ends at 0)."""
        if not self.segments:
            return 0
        last = self.segments[-1]
        return last.start if last.tree is None else None

    def segment(self, slot: int) -> Segment:
        return self.segments[bisect.bisect_right(self.starts, slot) - 1]

    def assign(self, start: int, count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Component, draw number (over the run) and revision of slots start..start+count-1."""
        return self.assign_slots(np.arange(start, start + count, dtype=np.int64))

    def assign_slots(self, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Component, draw number (over the run) and revision of each slot (any order)."""
        n = len(slots)
        comps, draws, revs = np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.int64)
        which = np.searchsorted(np.asarray(self.starts, dtype=np.int64), slots, side="right") - 1
        # Slots come sorted, so segments are a range (np.unique costs more than the work here).
        for k in range(int(which.min()), int(which.max()) + 1) if n else ():
            seg = self.segments[k]
            if seg.tree is None:
                if (which == k).any():
                    raise IndexError(
                        f"slot {int(slots[which == k].min())} is past the mixture stream's end at {seg.start}"
                    )
                continue
            sel = slice(None) if k == which[0] == which[-1] else which == k
            x = slots[sel] - seg.start
            if not len(x):
                continue
            c, d = assign_local(seg.tree, x)
            comps[sel] = c
            draws[sel] = d + np.asarray(seg.base, dtype=np.int64)[c]
            revs[sel] = seg.revision
        return comps, draws, revs

    def depth(self) -> int:
        """The deepest tree of any segment: the share bound over L slots is depth / L."""
        return max((tree_depth(s.tree) for s in self.segments if s.tree is not None), default=0)


def _max_b(tree: Tree) -> int:
    return 1 if isinstance(tree, int) else max(tree[1], _max_b(tree[2]), _max_b(tree[3]))
